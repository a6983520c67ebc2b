#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "cli.h"

/*
 * prophetctl token-hash: reads a token from stdin (not from the command
 * line, where ps and the shell history would show it) and prints what a
 * tokens file may hold instead of it.
 */
int
cmd_token_hash(struct cli *c, int argc, char **argv)
{
	char line[1024], out[AUTH_HASH_TEXT_LEN];
	size_t n;

	if (argc != 1) {
		fprintf(stderr, "usage: prophetctl token-hash < TOKENFILE\n");
		return 2;
	}
	if (fgets(line, sizeof(line), stdin) == NULL) {
		fprintf(stderr, "prophetctl: no token on stdin\n");
		return 1;
	}
	n = strcspn(line, "\r\n");
	line[n] = '\0';
	for (size_t i = 0; i < n; i++) {
		if (isspace((unsigned char)line[i])) {
			fprintf(stderr, "prophetctl: a token holds no "
					"whitespace\n");
			return 1;
		}
	}
	if (n < 16 || n > 256) {
		fprintf(stderr, "prophetctl: a token has 16-256 characters\n");
		return 1;
	}
	auth_token_hash(line, n, out);
	memset(line, 0, sizeof(line));
	printf("%s\n", out);
	return 0;
}
