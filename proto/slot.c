#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include "slot.h"

uint32_t
slot_hash(const char *id, size_t len)
{
	uint32_t h = 2166136261u;

	for (size_t i = 0; i < len; i++) {
		h ^= (unsigned char)id[i];
		h *= 16777619u;
	}
	return h;
}

/* FNV-1a alone is weak in its low bits (a multiply only carries upward),
 * and slot counts are often powers of two: finish with murmur3's fmix32 so
 * every input bit reaches the bits the modulo keeps. */
static uint32_t
fmix32(uint32_t h)
{
	h ^= h >> 16;
	h *= 0x85ebca6bu;
	h ^= h >> 13;
	h *= 0xc2b2ae35u;
	h ^= h >> 16;
	return h;
}

int
slot_of(const char *id, size_t len, int nslots)
{
	return (int)(fmix32(slot_hash(id, len)) % (uint32_t)nslots);
}
