#ifndef PROPHET_HMAP_H
#define PROPHET_HMAP_H

#include <stddef.h>

/*
 * A string-keyed hash map (chained, power-of-two buckets, grows at load 1
 * and shrinks below load 1/4, never under its initial 64 buckets). Keys
 * are borrowed: they must live as long as their entry, which is natural
 * when the key is a field of the value. Keys may be chosen by clients
 * (task ids), so the hash is SipHash-1-3 with a random key per map: which
 * keys collide cannot be known from outside.
 */
struct hmap;

struct hmap *hmap_create(void);
void hmap_destroy(struct hmap *m);
/* Returns the previous value for key, or NULL. */
void *hmap_put(struct hmap *m, const char *key, void *value);
void *hmap_get(const struct hmap *m, const char *key);
void *hmap_del(struct hmap *m, const char *key);
size_t hmap_count(const struct hmap *m);
/* Buckets in use now (for tests of growing and shrinking). */
size_t hmap_buckets(const struct hmap *m);
/* A set of strings: *m (made on the first add) holds a copy of each,
 * as key and value; hmap_set_free frees the copies and the map, and
 * sets *m to NULL. */
void hmap_set_add(struct hmap **m, const char *key);
void hmap_set_free(struct hmap **m);
/* Calls fn for every entry; fn must not modify the map. */
void hmap_foreach(struct hmap *m,
		  void (*fn)(const char *key, void *value, void *arg),
		  void *arg);

#endif
