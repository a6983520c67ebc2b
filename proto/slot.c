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

int
slot_of(const char *id, size_t len, int nslots)
{
	return (int)(slot_hash(id, len) % (uint32_t)nslots);
}
