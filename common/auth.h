#ifndef PROPHET_AUTH_H
#define PROPHET_AUTH_H

#include <stddef.h>

/*
 * Bearer tokens with roles, from a file only its owner may read: one
 * "<token> <role>[,<role>...]" a line; '#' at the start of a line or after
 * whitespace starts a comment (inside a token it is part of it). A token
 * may be stored as "sha256:<64 hex digits>", the SHA-256 of the token the
 * clients send. Roles: submit, read, admin (admin implies the others).
 * Tokens are compared in constant time.
 */
enum auth_role {
	AUTH_SUBMIT = 1,
	AUTH_READ = 2,
	AUTH_ADMIN = 4,
};

#define AUTH_HASH_PREFIX "sha256:"
/* "sha256:" + 64 hex digits + NUL */
#define AUTH_HASH_TEXT_LEN (sizeof(AUTH_HASH_PREFIX) - 1 + 64 + 1)

struct auth;

/* NULL path or "": authentication off (auth_check always passes). A file
 * that group or others may read or write is refused. */
struct auth *auth_load(const char *path, char *err, size_t errlen);
void auth_destroy(struct auth *a);
int auth_enabled(const struct auth *a);
/* "submit", "read" or "admin": the role a call needs, for messages. */
const char *auth_role_name(int role);
/*
 * Checks an Authorization header value against the role a call needs.
 * Returns 0 (allowed), 401 (no or unknown token) or 403 (token lacks the
 * role).
 */
int auth_check(const struct auth *a, const char *authorization,
	       enum auth_role need);
/* Writes "sha256:<hex>" of token[0..len) to out (AUTH_HASH_TEXT_LEN
 * bytes), what a tokens file may hold instead of the token. */
void auth_token_hash(const char *token, size_t len,
		     char out[AUTH_HASH_TEXT_LEN]);

#endif
