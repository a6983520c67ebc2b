#ifndef PROPHET_CRYPTO_H
#define PROPHET_CRYPTO_H

#include <stddef.h>

/* The few primitives of OpenSSL's libcrypto the programs use. */

#define CRYPTO_SHA256_LEN 32

/* SHA-256 of data into out (CRYPTO_SHA256_LEN bytes). */
void crypto_sha256(const void *data, size_t len, unsigned char *out);
#define CRYPTO_SHA1_LEN 20

/* SHA-1 of data into out (CRYPTO_SHA1_LEN bytes), for formats that name
 * it (ZooKeeper's digest identities); not for new uses. */
void crypto_sha1(const void *data, size_t len, unsigned char *out);
/* Base64 of n bytes into out, NUL-terminated; out holds 4*((n+2)/3)+1. */
void crypto_base64(const void *in, size_t n, char *out);
/* HMAC-SHA256 of data under key into out (CRYPTO_SHA256_LEN bytes). */
void crypto_hmac_sha256(const void *key, size_t keylen, const void *data,
			size_t len, unsigned char *out);
/* n bytes from the system's CSPRNG; -1 if it has none to give. */
int crypto_random(void *buf, size_t n);
/* 1 if a and b (n bytes each) are equal, in time independent of where
 * they differ. */
int crypto_equal(const void *a, const void *b, size_t n);

#endif
