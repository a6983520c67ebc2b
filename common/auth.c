#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "auth.h"
#include "crypto.h"
#include "secret.h"
#include "xmalloc.h"

#define AUTH_TOKEN_MAX 256
#define AUTH_HASH_LEN CRYPTO_SHA256_LEN

/* Every token is kept as its SHA-256 only, given as a hash or not: a
 * check hashes what was sent and compares fixed-length digests, so its
 * time tells neither where a token differs nor how long the stored ones
 * are, and no token is in the daemon's memory. */
struct auth_token {
	unsigned char hash[AUTH_HASH_LEN];
	int roles;
};

struct auth {
	struct auth_token *tokens;
	size_t n;
};

void
auth_token_hash(const char *token, size_t len, char out[AUTH_HASH_TEXT_LEN])
{
	static const char hex[] = "0123456789abcdef";
	unsigned char h[AUTH_HASH_LEN];
	char *o = out + strlen(AUTH_HASH_PREFIX);

	crypto_sha256(token, len, h);
	memcpy(out, AUTH_HASH_PREFIX, strlen(AUTH_HASH_PREFIX));
	for (size_t i = 0; i < AUTH_HASH_LEN; i++) {
		*o++ = hex[h[i] >> 4];
		*o++ = hex[h[i] & 15];
	}
	*o = '\0';
}

static int
hex_value(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* "sha256:<64 hex>" into its 32 bytes. */
static int
parse_hash(const char *s, unsigned char out[AUTH_HASH_LEN])
{
	s += strlen(AUTH_HASH_PREFIX);
	if (strlen(s) != 2 * AUTH_HASH_LEN)
		return -1;
	for (size_t i = 0; i < AUTH_HASH_LEN; i++) {
		int hi = hex_value(s[2 * i]), lo = hex_value(s[2 * i + 1]);

		if (hi < 0 || lo < 0)
			return -1;
		out[i] = (unsigned char)(hi << 4 | lo);
	}
	return 0;
}

/* '#' starts a comment only at the start of a line or after whitespace:
 * a token may contain one. */
static void
strip_comment(char *line)
{
	for (char *p = line; *p != '\0'; p++) {
		if (*p == '#' && (p == line || isspace((unsigned char)p[-1]))) {
			*p = '\0';
			return;
		}
	}
}

static int
parse_roles(char *s, int *roles)
{
	char *save = NULL;

	*roles = 0;
	for (char *r = strtok_r(s, ",", &save); r;
	     r = strtok_r(NULL, ",", &save)) {
		if (!strcmp(r, "submit"))
			*roles |= AUTH_SUBMIT;
		else if (!strcmp(r, "read"))
			*roles |= AUTH_READ;
		else if (!strcmp(r, "admin"))
			*roles |= AUTH_ADMIN | AUTH_SUBMIT | AUTH_READ;
		else
			return -1;
	}
	return *roles ? 0 : -1;
}

const char *
auth_role_name(int role)
{
	return role == AUTH_SUBMIT ? "submit"
	       : role == AUTH_READ ? "read"
				   : "admin";
}

struct auth *
auth_load(const char *path, char *err, size_t errlen)
{
	struct auth *a = xcalloc(1, sizeof(*a));
	char line[1024];
	FILE *fp;
	int lineno = 0;

	if (path == NULL || path[0] == '\0')
		return a;
	fp = fopen(path, "r");
	if (fp == NULL) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		xfree(a);
		return NULL;
	}
	if (secret_fd_private(fileno(fp), path, "the tokens", err, errlen) <
	    0) {
		fclose(fp);
		xfree(a);
		return NULL;
	}
	while (fgets(line, sizeof(line), fp) != NULL) {
		char *p = line, *tok, *roles, *save = NULL;
		struct auth_token *t;
		int r;

		lineno++;
		strip_comment(line);
		while (isspace((unsigned char)*p))
			p++;
		if (*p == '\0')
			continue;
		tok = strtok_r(p, " \t\r\n", &save);
		roles = strtok_r(NULL, " \t\r\n", &save);
		if (tok == NULL || roles == NULL ||
		    strtok_r(NULL, " \t\r\n", &save) || strlen(tok) < 16 ||
		    strlen(tok) > AUTH_TOKEN_MAX ||
		    parse_roles(roles, &r) < 0) {
			snprintf(err, errlen,
				 "%s:%d: expected '<token of 16-%d chars> "
				 "<role>[,<role>]' with roles submit, read, "
				 "admin",
				 path, lineno, AUTH_TOKEN_MAX);
			goto fail;
		}
		a->tokens =
			xrealloc(a->tokens, (a->n + 1) * sizeof(*a->tokens));
		t = &a->tokens[a->n];
		memset(t, 0, sizeof(*t));
		t->roles = r;
		if (!strncmp(tok, AUTH_HASH_PREFIX, strlen(AUTH_HASH_PREFIX))) {
			if (parse_hash(tok, t->hash) < 0) {
				snprintf(err, errlen,
					 "%s:%d: a stored hash is 'sha256:' "
					 "and 64 hex digits (prophetctl "
					 "token-hash prints it)",
					 path, lineno);
				goto fail;
			}
		} else {
			crypto_sha256(tok, strlen(tok), t->hash);
		}
		a->n++;
	}
	fclose(fp);
	memset(line, 0, sizeof(line));
	if (a->n == 0) {
		snprintf(err, errlen,
			 "%s: no tokens (an empty file would lock "
			 "everyone out)",
			 path);
		auth_destroy(a);
		return NULL;
	}
	return a;
fail:
	memset(line, 0, sizeof(line));
	fclose(fp);
	auth_destroy(a);
	return NULL;
}

void
auth_destroy(struct auth *a)
{
	if (a == NULL)
		return;
	xfree(a->tokens);
	xfree(a);
}

int
auth_enabled(const struct auth *a)
{
	return a != NULL && a->n > 0;
}

int
auth_check(const struct auth *a, const char *authorization, enum auth_role need)
{
	unsigned char hash[AUTH_HASH_LEN] = {0};
	const char *tok;
	size_t len;
	int roles = 0;

	if (!auth_enabled(a))
		return 0;
	if (authorization == NULL ||
	    strncasecmp(authorization, "Bearer ", 7) != 0)
		return 401;
	tok = authorization + 7;
	while (*tok == ' ')
		tok++;
	len = strlen(tok);
	if (len == 0 || len > AUTH_TOKEN_MAX)
		return 401;
	crypto_sha256(tok, len, hash);
	/* Every token is compared, so timing tells nothing about which. */
	for (size_t i = 0; i < a->n; i++) {
		const struct auth_token *t = &a->tokens[i];

		if (crypto_equal(hash, t->hash, AUTH_HASH_LEN))
			roles |= t->roles;
	}
	if (roles == 0)
		return 401;
	return (roles & (int)need) ? 0 : 403;
}
