#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "secret.h"
#include "xmalloc.h"

#define SECRET_MAX 4096

int
secret_fd_private(int fd, const char *path, const char *what, char *err,
		  size_t errlen)
{
	struct stat st;

	if (fstat(fd, &st) < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	if (!S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "%s: not a regular file", path);
		return -1;
	}
	if (st.st_mode & 077) {
		snprintf(err, errlen,
			 "%s: mode %04o lets group or others read or write "
			 "%s: chmod 600 it (owner only)",
			 path, (unsigned)(st.st_mode & 07777), what);
		return -1;
	}
	return 0;
}

char *
secret_read_file(const char *path, const char *what, char *err, size_t errlen)
{
	char buf[SECRET_MAX + 2];
	size_t n = 0;
	ssize_t r;
	int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	char *s;

	if (fd < 0) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return NULL;
	}
	if (secret_fd_private(fd, path, what, err, errlen) < 0) {
		close(fd);
		return NULL;
	}
	while (n < sizeof(buf) &&
	       (r = read(fd, buf + n, sizeof(buf) - n)) != 0) {
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "%s: %s", path, strerror(errno));
			close(fd);
			explicit_bzero(buf, sizeof(buf));
			return NULL;
		}
		n += (size_t)r;
	}
	close(fd);
	if (n > 0 && buf[n - 1] == '\n')
		n--;
	if (n > 0 && buf[n - 1] == '\r')
		n--;
	if (n == 0 || n > SECRET_MAX || memchr(buf, '\n', n) != NULL ||
	    memchr(buf, '\0', n) != NULL) {
		snprintf(err, errlen,
			 "%s: must hold %s on one line (1-%d bytes, no NUL)",
			 path, what, SECRET_MAX);
		explicit_bzero(buf, sizeof(buf));
		return NULL;
	}
	s = xstrndup(buf, n);
	explicit_bzero(buf, sizeof(buf));
	return s;
}

void
secret_free(char *s)
{
	if (s == NULL)
		return;
	explicit_bzero(s, strlen(s));
	xfree(s);
}
