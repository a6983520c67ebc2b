#ifndef PROPHET_WHSIGN_H
#define PROPHET_WHSIGN_H

#include <stddef.h>
#include <stdint.h>

/*
 * Callback signatures in the Standard Webhooks form
 * (https://www.standardwebhooks.com): headers webhook-id,
 * webhook-timestamp (Unix seconds) and webhook-signature, a
 * space-separated list of "v1,<base64 of HMAC-SHA256(key,
 * "<id>.<timestamp>.<body>")>", one for each key, so that a receiver
 * holding any of them accepts the request while keys are rotated. Keys
 * are written "whsec_<base64 of 24-64 random bytes>", several on the one
 * line separated by spaces (the first one new, the others kept for
 * receivers not yet moved).
 */

#define WHSIGN_MAX_KEYS 4
#define WHSIGN_KEY_MIN 24
#define WHSIGN_KEY_MAX 64

struct whsign {
	size_t n;
	size_t len[WHSIGN_MAX_KEYS];
	unsigned char key[WHSIGN_MAX_KEYS][WHSIGN_KEY_MAX];
};

/* The keys of text into *ks; -1 with the reason in err (no key's bytes
 * in it) if one is not of the form above or there are none or too
 * many. */
int whsign_parse(struct whsign *ks, const char *text, char *err, size_t errlen);
/* The webhook-signature value for one request, a new string. */
char *whsign_header(const struct whsign *ks, const char *msg_id,
		    int64_t timestamp, const void *body, size_t len);
/* Zeroes the keys. */
void whsign_wipe(struct whsign *ks);

#endif
