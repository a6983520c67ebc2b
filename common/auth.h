#ifndef PROPHET_AUTH_H
#define PROPHET_AUTH_H

/*
 * Bearer tokens with roles, from a file: one "<token> <role>[,<role>...]"
 * a line, '#' starts a comment. Roles: submit, read, admin (admin implies
 * the others). Tokens are compared in constant time.
 */
enum auth_role {
	AUTH_SUBMIT = 1,
	AUTH_READ = 2,
	AUTH_ADMIN = 4,
};

struct auth;

/* NULL path or "": authentication off (auth_check always passes). */
struct auth *auth_load(const char *path, char *err, size_t errlen);
void auth_destroy(struct auth *a);
int auth_enabled(const struct auth *a);
/*
 * Checks an Authorization header value against the role a call needs.
 * Returns 0 (allowed), 401 (no or unknown token) or 403 (token lacks the
 * role).
 */
int auth_check(const struct auth *a, const char *authorization,
	       enum auth_role need);

#endif
