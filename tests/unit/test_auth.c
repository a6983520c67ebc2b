#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "auth.h"

static char path[64];

/* A tokens file with text, mode mode; its path in path. */
static void
write_tokens(const char *text, mode_t mode)
{
	int fd;
	FILE *fp;

	snprintf(path, sizeof(path), "/tmp/prophet-test-auth-XXXXXX");
	fd = mkstemp(path);
	assert_true(fd >= 0);
	fp = fdopen(fd, "w");
	assert_non_null(fp);
	fputs(text, fp);
	fclose(fp);
	assert_int_equal(chmod(path, mode), 0);
}

static struct auth *
load(const char *text, mode_t mode, char *err, size_t errlen)
{
	struct auth *a;

	write_tokens(text, mode);
	err[0] = '\0';
	a = auth_load(path, err, errlen);
	unlink(path);
	return a;
}

static int
check(const struct auth *a, const char *token, enum auth_role need)
{
	char hdr[400];

	snprintf(hdr, sizeof(hdr), "Bearer %s", token);
	return auth_check(a, hdr, need);
}

static void
test_mode_refused(void **state)
{
	static const mode_t bad[] = {0644, 0640, 0604, 0620, 0602, 0660};
	char err[512];

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char want[16];

		assert_null(load("sub-0123456789abcdef submit\n", bad[i], err,
				 sizeof(err)));
		/* The message names the file and its mode. */
		assert_non_null(strstr(err, path));
		snprintf(want, sizeof(want), "%04o", (unsigned)bad[i]);
		assert_non_null(strstr(err, want));
		assert_non_null(strstr(err, "chmod 600"));
	}
}

static void
test_owner_only_accepted(void **state)
{
	static const mode_t good[] = {0600, 0400};
	char err[512];

	for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
		struct auth *a = load("sub-0123456789abcdef submit\n", good[i],
				      err, sizeof(err));

		assert_non_null(a);
		assert_int_equal(check(a, "sub-0123456789abcdef", AUTH_SUBMIT),
				 0);
		auth_destroy(a);
	}
}

/* '#' inside a token is part of it; at the start of a line or after
 * whitespace it starts a comment. */
static void
test_hash_sign_in_token(void **state)
{
	char err[512];
	struct auth *a = load("# a comment line\n"
			      "   # an indented one\n"
			      "abc#def0123456789 read\n"
			      "adm-0123456789abcdef admin # trailing\n"
			      "x#-0123456789abcdef submit\t# after a tab\n",
			      0600, err, sizeof(err));

	assert_non_null(a);
	assert_int_equal(check(a, "abc#def0123456789", AUTH_READ), 0);
	assert_int_equal(check(a, "abc", AUTH_READ), 401);
	assert_int_equal(check(a, "adm-0123456789abcdef", AUTH_ADMIN), 0);
	assert_int_equal(check(a, "x#-0123456789abcdef", AUTH_SUBMIT), 0);
	assert_int_equal(check(a, "x#-0123456789abcdef", AUTH_READ), 403);
	auth_destroy(a);
	/* A role with '#' glued to it is no role. */
	assert_null(
		load("abc-0123456789abcdef read#x\n", 0600, err, sizeof(err)));
	assert_non_null(strstr(err, ":1:"));
}

static void
test_sha256_vector(void **state)
{
	char out[AUTH_HASH_TEXT_LEN];

	auth_token_hash("abc", 3, out);
	assert_string_equal(out, "sha256:ba7816bf8f01cfea414140de5dae2223b0036"
				 "1a396177a9cb410ff61f20015ad");
	auth_token_hash("", 0, out);
	assert_string_equal(out, "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae4"
				 "1e4649b934ca495991b7852b855");
}

static void
test_hashed_token(void **state)
{
	const char *tok = "hashed-0123456789#abc";
	char hash[AUTH_HASH_TEXT_LEN], text[512], err[512];
	struct auth *a;

	auth_token_hash(tok, strlen(tok), hash);
	snprintf(text, sizeof(text),
		 "%s submit,read\nplain-0123456789abcdef admin\n", hash);
	a = load(text, 0600, err, sizeof(err));
	assert_non_null(a);
	assert_int_equal(check(a, tok, AUTH_SUBMIT), 0);
	assert_int_equal(check(a, tok, AUTH_READ), 0);
	assert_int_equal(check(a, tok, AUTH_ADMIN), 403);
	/* The stored hash itself is no token. */
	assert_int_equal(check(a, hash, AUTH_SUBMIT), 401);
	assert_int_equal(check(a, "hashed-0123456789#abd", AUTH_SUBMIT), 401);
	assert_int_equal(check(a, "plain-0123456789abcdef", AUTH_ADMIN), 0);
	auth_destroy(a);
	/* Upper-case hex is the same hash. */
	for (char *p = hash + 7; *p; p++)
		if (*p >= 'a' && *p <= 'f')
			*p = (char)(*p - 'a' + 'A');
	snprintf(text, sizeof(text), "%s read\n", hash);
	a = load(text, 0600, err, sizeof(err));
	assert_non_null(a);
	assert_int_equal(check(a, tok, AUTH_READ), 0);
	auth_destroy(a);
}

static void
test_bad_hash_refused(void **state)
{
	static const char *const bad[] = {
		"sha256:abc read\n",
		"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff"
		"61f20015a read\n", /* 63 digits */
		"sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff"
		"61f20015adx read\n",
		"sha256:zz7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff"
		"61f20015ad read\n",
		NULL};
	char err[512];

	for (int i = 0; bad[i]; i++) {
		assert_null(load(bad[i], 0600, err, sizeof(err)));
		assert_non_null(strstr(err, ":1:"));
	}
}

static void
test_missing_file(void **state)
{
	struct auth *a;
	char err[512];

	assert_null(auth_load("/nonexistent/prophet-tokens", err, sizeof(err)));
	assert_non_null(strstr(err, "/nonexistent/prophet-tokens"));
	a = auth_load("", err, sizeof(err));
	assert_non_null(a);
	assert_false(auth_enabled(a));
	auth_destroy(a);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_mode_refused),
		cmocka_unit_test(test_owner_only_accepted),
		cmocka_unit_test(test_hash_sign_in_token),
		cmocka_unit_test(test_sha256_vector),
		cmocka_unit_test(test_hashed_token),
		cmocka_unit_test(test_bad_hash_refused),
		cmocka_unit_test(test_missing_file),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
