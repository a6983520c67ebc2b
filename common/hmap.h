#ifndef PROPHET_HMAP_H
#define PROPHET_HMAP_H

#include <stddef.h>

/*
 * A string-keyed hash map (chained, power-of-two buckets, grows at load
 * 1). Keys are borrowed: they must live as long as their entry, which is
 * natural when the key is a field of the value.
 */
struct hmap;

struct hmap *hmap_create(void);
void hmap_destroy(struct hmap *m);
/* Returns the previous value for key, or NULL. */
void *hmap_put(struct hmap *m, const char *key, void *value);
void *hmap_get(const struct hmap *m, const char *key);
void *hmap_del(struct hmap *m, const char *key);
size_t hmap_count(const struct hmap *m);
/* Calls fn for every entry; fn must not modify the map. */
void hmap_foreach(struct hmap *m,
		  void (*fn)(const char *key, void *value, void *arg),
		  void *arg);

#endif
