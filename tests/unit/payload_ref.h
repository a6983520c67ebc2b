#ifndef PROPHET_PAYLOAD_REF_H
#define PROPHET_PAYLOAD_REF_H

#include <stddef.h>

#include "task.h"

/*
 * The jansson-tree payload codec that proto/payload.c replaced, kept as
 * the reference the fast one must match byte for byte (encoding) and
 * verdict for verdict (decoding; that one is payload_decode_tree, which
 * payload_decode still falls back to for real numbers and NUL bytes).
 */
char *ref_payload_encode(const struct task *t, size_t *lenp);
int ref_payload_decode(const char *s, size_t len, struct task *t);
/* 1 when a and b hold the same payload members. */
int ref_payload_same(const struct task *a, const struct task *b);

#endif
