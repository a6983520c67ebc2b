#ifndef PROPHET_HASH_H
#define PROPHET_HASH_H

#include <stddef.h>
#include <stdint.h>

/*
 * FNV-1a, 64 bits: the task content hash (stored in the DB) and the
 * notifier's retry ids and jitter depend on it, so it must never change.
 * Chain calls starting from FNV64_OFFSET.
 */
#define FNV64_OFFSET 14695981039346656037ULL

static inline uint64_t
fnv64(uint64_t h, const void *data, size_t n)
{
	const unsigned char *p = data;

	for (size_t i = 0; i < n; i++) {
		h ^= p[i];
		h *= 1099511628211ULL;
	}
	return h;
}

#endif
