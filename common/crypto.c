#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include "crypto.h"

void
crypto_sha256(const void *data, size_t len, unsigned char *out)
{
	unsigned int outlen = CRYPTO_SHA256_LEN;

	/* only fails on allocation or a missing digest: a broken install */
	if (EVP_Digest(data, len, out, &outlen, EVP_sha256(), NULL) != 1 ||
	    outlen != CRYPTO_SHA256_LEN)
		abort();
}

void
crypto_sha1(const void *data, size_t len, unsigned char *out)
{
	unsigned int outlen = CRYPTO_SHA1_LEN;

	/* only fails on allocation or a missing digest: a broken install */
	if (EVP_Digest(data, len, out, &outlen, EVP_sha1(), NULL) != 1 ||
	    outlen != CRYPTO_SHA1_LEN)
		abort();
}

void
crypto_base64(const void *in, size_t n, char *out)
{
	EVP_EncodeBlock((unsigned char *)out, in, (int)n);
}

void
crypto_hmac_sha256(const void *key, size_t keylen, const void *data, size_t len,
		   unsigned char *out)
{
	unsigned int outlen = CRYPTO_SHA256_LEN;

	/* only fails on allocation or a missing digest: a broken install */
	if (HMAC(EVP_sha256(), key, (int)keylen, data, len, out, &outlen) ==
		    NULL ||
	    outlen != CRYPTO_SHA256_LEN)
		abort();
}

int
crypto_random(void *buf, size_t n)
{
	return RAND_bytes(buf, (int)n) == 1 ? 0 : -1;
}

int
crypto_equal(const void *a, const void *b, size_t n)
{
	return CRYPTO_memcmp(a, b, n) == 0;
}
