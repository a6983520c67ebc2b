#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <endian.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "hmap.h"
#include "xmalloc.h"

#define HMAP_MIN_BUCKETS 64

struct hmap_entry {
	const char *key;
	void *value;
	uint64_t hash;
	struct hmap_entry *next;
};

struct hmap {
	struct hmap_entry **buckets;
	size_t nbuckets;
	size_t count;
	uint64_t k0, k1; /* the SipHash key */
};

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))
#define SIPROUND                   \
	do {                       \
		v0 += v1;          \
		v1 = ROTL(v1, 13); \
		v1 ^= v0;          \
		v0 = ROTL(v0, 32); \
		v2 += v3;          \
		v3 = ROTL(v3, 16); \
		v3 ^= v2;          \
		v0 += v3;          \
		v3 = ROTL(v3, 21); \
		v3 ^= v0;          \
		v2 += v1;          \
		v1 = ROTL(v1, 17); \
		v1 ^= v2;          \
		v2 = ROTL(v2, 32); \
	} while (0)

/*
 * SipHash-1-3 (one compression round per word, three to finish): keyed,
 * so that clients choosing ids cannot aim them at one bucket, and about as
 * cheap as FNV-1a on ids of a few dozen bytes, which it reads a word at a
 * time. The rounds Python and Rust use for their hash tables.
 */
static uint64_t
siphash13(const struct hmap *m, const char *s, size_t len)
{
	uint64_t v0 = 0x736f6d6570736575ULL ^ m->k0;
	uint64_t v1 = 0x646f72616e646f6dULL ^ m->k1;
	uint64_t v2 = 0x6c7967656e657261ULL ^ m->k0;
	uint64_t v3 = 0x7465646279746573ULL ^ m->k1;
	const unsigned char *p = (const unsigned char *)s;
	const unsigned char *end = p + (len & ~(size_t)7);
	uint64_t w, b = (uint64_t)len << 56;

	for (; p != end; p += 8) {
		memcpy(&w, p, 8);
		w = le64toh(w);
		v3 ^= w;
		SIPROUND;
		v0 ^= w;
	}
	switch (len & 7) {
	case 7: b |= (uint64_t)p[6] << 48; /* fall through */
	case 6: b |= (uint64_t)p[5] << 40; /* fall through */
	case 5: b |= (uint64_t)p[4] << 32; /* fall through */
	case 4: b |= (uint64_t)p[3] << 24; /* fall through */
	case 3: b |= (uint64_t)p[2] << 16; /* fall through */
	case 2: b |= (uint64_t)p[1] << 8;  /* fall through */
	case 1: b |= (uint64_t)p[0]; break;
	default: break;
	}
	v3 ^= b;
	SIPROUND;
	v0 ^= b;
	v2 ^= 0xff;
	SIPROUND;
	SIPROUND;
	SIPROUND;
	return v0 ^ v1 ^ v2 ^ v3;
}

static uint64_t
hash_str(const struct hmap *m, const char *s)
{
	return siphash13(m, s, strlen(s));
}

struct hmap *
hmap_create(void)
{
	struct hmap *m = xcalloc(1, sizeof(*m));
	uint64_t k[2];

	if (getrandom(k, sizeof(k), 0) != (ssize_t)sizeof(k))
		abort();
	m->k0 = k[0];
	m->k1 = k[1];
	m->nbuckets = HMAP_MIN_BUCKETS;
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
resize(struct hmap *m, size_t nb)
{
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
	uint64_t h = hash_str(m, key);
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
		resize(m, m->nbuckets * 2);
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
	uint64_t h = hash_str(m, key);

	for (struct hmap_entry *e = m->buckets[h & (m->nbuckets - 1)];
	     e != NULL; e = e->next)
		if (e->hash == h && !strcmp(e->key, key))
			return e->value;
	return NULL;
}

/* A map that held a burst gives its buckets back once the burst is gone;
 * halving at load 1/4 leaves it half full, so put and del at the boundary
 * do not resize every time. */
void *
hmap_del(struct hmap *m, const char *key)
{
	uint64_t h = hash_str(m, key);
	struct hmap_entry **pp = &m->buckets[h & (m->nbuckets - 1)], *e;

	for (; (e = *pp) != NULL; pp = &e->next) {
		if (e->hash == h && !strcmp(e->key, key)) {
			void *v = e->value;

			*pp = e->next;
			xfree(e);
			m->count--;
			if (m->nbuckets > HMAP_MIN_BUCKETS &&
			    m->count < m->nbuckets / 4)
				resize(m, m->nbuckets / 2);
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

size_t
hmap_buckets(const struct hmap *m)
{
	return m->nbuckets;
}

void
hmap_set_add(struct hmap **m, const char *key)
{
	char *k;

	if (*m == NULL)
		*m = hmap_create();
	else if (hmap_get(*m, key) != NULL)
		return;
	k = xstrdup(key);
	hmap_put(*m, k, k);
}

static void
free_value(const char *key, void *value, void *arg)
{
	(void)key;
	(void)arg;
	xfree(value);
}

void
hmap_set_free(struct hmap **m)
{
	if (*m == NULL)
		return;
	/* Each value is its entry's key: freed, then never read again (the
	 * walk reads the next entry, hmap_destroy no key). */
	hmap_foreach(*m, free_value, NULL);
	hmap_destroy(*m);
	*m = NULL;
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
