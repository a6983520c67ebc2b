#ifndef PROPHET_SLOT_H
#define PROPHET_SLOT_H

#include <stddef.h>
#include <stdint.h>

/*
 * slot = fmix32(FNV-1a-32(id)) mod slots (fmix32: murmur3's finaliser). Part of the on-disk format: a task's slot
 * is stored with it, and the hash must never change.
 */
uint32_t slot_hash(const char *id, size_t len);
int slot_of(const char *id, size_t len, int nslots);

#endif
