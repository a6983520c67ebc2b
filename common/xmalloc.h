#ifndef PROPHET_XMALLOC_H
#define PROPHET_XMALLOC_H

#include <stddef.h>

/* Allocation never fails: these abort the process when memory runs out. */
void *xmalloc(size_t size);
void *xcalloc(size_t nmemb, size_t size);
void *xrealloc(void *ptr, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
void *xmemdup(const void *p, size_t n);
void xfree(void *ptr);
/* calloc's contract (NULL when memory runs out, for callers that handle
 * it), through malloc's per-thread cache for small blocks. */
void *zalloc(size_t nmemb, size_t size);
/* Returns a newly allocated printf-formatted string. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
