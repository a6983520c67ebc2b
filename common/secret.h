#ifndef PROPHET_SECRET_H
#define PROPHET_SECRET_H

#include <stddef.h>

/*
 * Secrets kept in files of their own (passwords, tokens), so that the
 * configuration file, which many may read, holds none: a file group or
 * others may read or write is refused, naming it and what it holds.
 */

/* 0 if fd is a regular file only its owner may read and write; what
 * names its content in the message ("the tokens", "a password"). */
int secret_fd_private(int fd, const char *path, const char *what, char *err,
		      size_t errlen);
/*
 * The content of a private file of one line (a final newline is not
 * part of it) as a new string, wiped and freed with secret_free. Empty,
 * several lines, a NUL or more than 4 KiB are refused.
 */
char *secret_read_file(const char *path, const char *what, char *err,
		       size_t errlen);
void secret_free(char *s);

#endif
