#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdint.h>
#include <string.h>

#include "hmap.h"
#include "xmalloc.h"

struct hmap_entry {
	const char *key;
	void *value;
	uint32_t hash;
	struct hmap_entry *next;
};

struct hmap {
	struct hmap_entry **buckets;
	size_t nbuckets;
	size_t count;
};

static uint32_t
hash_str(const char *s)
{
	uint32_t h = 2166136261u;

	while (*s) {
		h ^= (unsigned char)*s++;
		h *= 16777619u;
	}
	return h;
}

struct hmap *
hmap_create(void)
{
	struct hmap *m = xcalloc(1, sizeof(*m));

	m->nbuckets = 64;
	m->buckets = xcalloc(m->nbuckets, sizeof(*m->buckets));
	return m;
}

void
hmap_destroy(struct hmap *m)
{
	if (m == NULL)
		return;
	for (size_t i = 0; i < m->nbuckets; i++) {
		struct hmap_entry *e = m->buckets[i], *n;

		for (; e != NULL; e = n) {
			n = e->next;
			xfree(e);
		}
	}
	xfree(m->buckets);
	xfree(m);
}

static void
grow(struct hmap *m)
{
	size_t nb = m->nbuckets * 2;
	struct hmap_entry **b = xcalloc(nb, sizeof(*b));

	for (size_t i = 0; i < m->nbuckets; i++) {
		struct hmap_entry *e = m->buckets[i], *n;

		for (; e != NULL; e = n) {
			n = e->next;
			e->next = b[e->hash & (nb - 1)];
			b[e->hash & (nb - 1)] = e;
		}
	}
	xfree(m->buckets);
	m->buckets = b;
	m->nbuckets = nb;
}

void *
hmap_put(struct hmap *m, const char *key, void *value)
{
	uint32_t h = hash_str(key);
	struct hmap_entry *e;

	for (e = m->buckets[h & (m->nbuckets - 1)]; e != NULL; e = e->next) {
		if (e->hash == h && !strcmp(e->key, key)) {
			void *old = e->value;

			e->value = value;
			e->key = key;
			return old;
		}
	}
	if (m->count >= m->nbuckets)
		grow(m);
	e = xmalloc(sizeof(*e));
	e->key = key;
	e->value = value;
	e->hash = h;
	e->next = m->buckets[h & (m->nbuckets - 1)];
	m->buckets[h & (m->nbuckets - 1)] = e;
	m->count++;
	return NULL;
}

void *
hmap_get(const struct hmap *m, const char *key)
{
	uint32_t h = hash_str(key);

	for (struct hmap_entry *e = m->buckets[h & (m->nbuckets - 1)];
	     e != NULL; e = e->next)
		if (e->hash == h && !strcmp(e->key, key))
			return e->value;
	return NULL;
}

void *
hmap_del(struct hmap *m, const char *key)
{
	uint32_t h = hash_str(key);
	struct hmap_entry **pp = &m->buckets[h & (m->nbuckets - 1)], *e;

	for (; (e = *pp) != NULL; pp = &e->next) {
		if (e->hash == h && !strcmp(e->key, key)) {
			void *v = e->value;

			*pp = e->next;
			xfree(e);
			m->count--;
			return v;
		}
	}
	return NULL;
}

size_t
hmap_count(const struct hmap *m)
{
	return m->count;
}

void
hmap_foreach(struct hmap *m,
	     void (*fn)(const char *key, void *value, void *arg), void *arg)
{
	for (size_t i = 0; i < m->nbuckets; i++)
		for (struct hmap_entry *e = m->buckets[i]; e != NULL;
		     e = e->next)
			fn(e->key, e->value, arg);
}
