#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "xmalloc.h"

static void
oom(size_t size)
{
	fprintf(stderr, "level=fatal msg=\"out of memory\" size=%zu\n", size);
	abort();
}

void *
xmalloc(size_t size)
{
	void *p = malloc(size ? size : 1);

	if (p == NULL)
		oom(size);
	return p;
}

/* Small blocks by malloc and memset: glibc's calloc bypasses the
 * per-thread cache that serves malloc, and a request's or a claim's
 * contexts are zeroed blocks of a few hundred bytes. Large ones by calloc
 * (fresh pages need no memset). */
#define ZALLOC_MEMSET_MAX (64 * 1024)

void *
zalloc(size_t nmemb, size_t size)
{
	void *p;

	if (nmemb == 0 || size == 0)
		nmemb = size = 1;
	if (size > ZALLOC_MEMSET_MAX / nmemb)
		return calloc(nmemb, size);
	p = malloc(nmemb * size);
	/* An empty asm that may read and write memory: without it the
	 * compiler folds malloc and memset back into calloc. */
	__asm__ volatile("" : : "r"(p) : "memory");
	if (p != NULL)
		memset(p, 0, nmemb * size);
	return p;
}

void *
xcalloc(size_t nmemb, size_t size)
{
	void *p = zalloc(nmemb, size);

	if (p == NULL)
		oom(nmemb * size);
	return p;
}

void *
xrealloc(void *ptr, size_t size)
{
	void *p = realloc(ptr, size ? size : 1);

	if (p == NULL)
		oom(size);
	return p;
}

char *
xstrdup(const char *s)
{
	return xmemdup(s, strlen(s) + 1);
}

char *
xstrndup(const char *s, size_t n)
{
	size_t len = strnlen(s, n);
	char *p = xmalloc(len + 1);

	memcpy(p, s, len);
	p[len] = '\0';
	return p;
}

void *
xmemdup(const void *src, size_t n)
{
	void *p = xmalloc(n);

	if (n)
		memcpy(p, src, n);
	return p;
}

void
xfree(void *ptr)
{
	free(ptr);
}

char *
xasprintf(const char *fmt, ...)
{
	va_list ap;
	char *s;

	va_start(ap, fmt);
	if (vasprintf(&s, fmt, ap) < 0)
		oom(0);
	va_end(ap);
	return s;
}
