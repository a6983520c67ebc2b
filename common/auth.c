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
#include "xmalloc.h"

#define AUTH_TOKEN_MAX 256

struct auth_token {
	char *token;
	size_t len;
	int roles;
};

struct auth {
	struct auth_token *tokens;
	size_t n;
};

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
	while (fgets(line, sizeof(line), fp) != NULL) {
		char *p = line, *tok, *roles, *hash = strchr(line, '#');
		int r;

		lineno++;
		if (hash != NULL)
			*hash = '\0';
		while (isspace((unsigned char)*p))
			p++;
		if (*p == '\0')
			continue;
		tok = strtok(p, " \t\r\n");
		roles = strtok(NULL, " \t\r\n");
		if (tok == NULL || roles == NULL || strtok(NULL, " \t\r\n") ||
		    strlen(tok) < 16 || strlen(tok) > AUTH_TOKEN_MAX ||
		    parse_roles(roles, &r) < 0) {
			snprintf(err, errlen,
				 "%s:%d: expected '<token of 16-%d chars> "
				 "<role>[,<role>]' with roles submit, read, "
				 "admin",
				 path, lineno, AUTH_TOKEN_MAX);
			fclose(fp);
			auth_destroy(a);
			return NULL;
		}
		a->tokens =
			xrealloc(a->tokens, (a->n + 1) * sizeof(*a->tokens));
		a->tokens[a->n].token = xstrdup(tok);
		a->tokens[a->n].len = strlen(tok);
		a->tokens[a->n].roles = r;
		a->n++;
	}
	fclose(fp);
	if (a->n == 0) {
		snprintf(err, errlen,
			 "%s: no tokens (an empty file would lock "
			 "everyone out)",
			 path);
		auth_destroy(a);
		return NULL;
	}
	return a;
}

void
auth_destroy(struct auth *a)
{
	if (a == NULL)
		return;
	for (size_t i = 0; i < a->n; i++) {
		memset(a->tokens[i].token, 0, a->tokens[i].len);
		xfree(a->tokens[i].token);
	}
	xfree(a->tokens);
	xfree(a);
}

int
auth_enabled(const struct auth *a)
{
	return a != NULL && a->n > 0;
}

/* Time depends on the lengths only, never on where the bytes differ. */
static int
ct_equal(const char *a, size_t alen, const char *b, size_t blen)
{
	size_t n = alen > blen ? alen : blen;
	unsigned char d = (unsigned char)(alen != blen);

	for (size_t i = 0; i < n; i++)
		d |= (unsigned char)((i < alen ? a[i] : 0) ^
				     (i < blen ? b[i] : 0));
	return d == 0;
}

int
auth_check(const struct auth *a, const char *authorization, enum auth_role need)
{
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
	/* Every token is compared, so timing tells nothing about which. */
	for (size_t i = 0; i < a->n; i++)
		if (ct_equal(tok, len, a->tokens[i].token, a->tokens[i].len))
			roles |= a->tokens[i].roles;
	if (roles == 0)
		return 401;
	return (roles & (int)need) ? 0 : 403;
}
