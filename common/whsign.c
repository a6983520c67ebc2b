#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include "crypto.h"
#include "whsign.h"
#include "xmalloc.h"

#define PREFIX "whsec_"
#define PREFIX_LEN 6

static int
b64_char(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
	       (c >= '0' && c <= '9') || c == '+' || c == '/';
}

/* Strict base64 (padded, standard alphabet) of s[0..n): its decoded
 * length, the first WHSIGN_KEY_MAX bytes of it into out; -1 if it is
 * not base64 or longer than B64_MAX characters. */
#define B64_MAX 344 /* 256 bytes */
static int
b64_decode(const char *s, size_t n, unsigned char *out)
{
	unsigned char buf[B64_MAX / 4 * 3];
	size_t pad = 0;
	int got;

	if (n == 0 || n % 4 != 0 || n > B64_MAX)
		return -1;
	while (pad < 2 && s[n - 1 - pad] == '=')
		pad++;
	for (size_t i = 0; i < n - pad; i++)
		if (!b64_char(s[i]))
			return -1;
	got = EVP_DecodeBlock(buf, (const unsigned char *)s, (int)n);
	if (got < 0 || (size_t)got < pad) {
		OPENSSL_cleanse(buf, sizeof(buf));
		return -1;
	}
	got -= (int)pad;
	memcpy(out, buf, got < WHSIGN_KEY_MAX ? (size_t)got : WHSIGN_KEY_MAX);
	OPENSSL_cleanse(buf, sizeof(buf));
	return got;
}

int
whsign_parse(struct whsign *ks, const char *text, char *err, size_t errlen)
{
	const char *p = text;

	memset(ks, 0, sizeof(*ks));
	for (;;) {
		size_t n;
		int len;

		while (*p == ' ' || *p == '\t')
			p++;
		if (*p == '\0')
			break;
		n = strcspn(p, " \t");
		if (ks->n == WHSIGN_MAX_KEYS) {
			snprintf(err, errlen, "more than %d keys",
				 WHSIGN_MAX_KEYS);
			goto fail;
		}
		if (n <= PREFIX_LEN || strncmp(p, PREFIX, PREFIX_LEN) != 0) {
			snprintf(err, errlen,
				 "key %zu does not start with \"" PREFIX
				 "\" (write keys as whsec_ and the base64 "
				 "of 24-64 random bytes)",
				 ks->n + 1);
			goto fail;
		}
		len = b64_decode(p + PREFIX_LEN, n - PREFIX_LEN,
				 ks->key[ks->n]);
		if (len < 0) {
			snprintf(err, errlen,
				 "key %zu: what follows whsec_ is not base64",
				 ks->n + 1);
			goto fail;
		}
		if (len < WHSIGN_KEY_MIN || len > WHSIGN_KEY_MAX) {
			snprintf(err, errlen, "key %zu has %d bytes, not %d-%d",
				 ks->n + 1, len, WHSIGN_KEY_MIN,
				 WHSIGN_KEY_MAX);
			goto fail;
		}
		ks->len[ks->n++] = (size_t)len;
		p += n;
	}
	if (ks->n == 0) {
		snprintf(err, errlen, "no key");
		goto fail;
	}
	return 0;
fail:
	whsign_wipe(ks);
	return -1;
}

char *
whsign_header(const struct whsign *ks, const char *msg_id, int64_t timestamp,
	      const void *body, size_t len)
{
	char head[300], *out;
	size_t hlen, olen = 0;
	unsigned char *data, mac[CRYPTO_SHA256_LEN];
	int k = snprintf(head, sizeof(head), "%s.%lld.", msg_id,
			 (long long)timestamp);

	hlen = k < 0			  ? 0
	       : (size_t)k < sizeof(head) ? (size_t)k
					  : sizeof(head) - 1;
	data = xmalloc(hlen + len + 1);
	memcpy(data, head, hlen);
	if (len > 0)
		memcpy(data + hlen, body, len);
	/* "v1," + 44 characters of base64 + a space, for each key */
	out = xmalloc(ks->n * 48 + 1);
	out[0] = '\0';
	for (size_t i = 0; i < ks->n; i++) {
		crypto_hmac_sha256(ks->key[i], ks->len[i], data, hlen + len,
				   mac);
		if (i > 0)
			out[olen++] = ' ';
		memcpy(out + olen, "v1,", 3);
		olen += 3;
		crypto_base64(mac, sizeof(mac), out + olen);
		olen += strlen(out + olen);
	}
	OPENSSL_cleanse(mac, sizeof(mac));
	xfree(data);
	return out;
}

void
whsign_wipe(struct whsign *ks)
{
	OPENSSL_cleanse(ks, sizeof(*ks));
}
