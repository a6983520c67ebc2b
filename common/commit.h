#ifndef PROPHET_COMMIT_H
#define PROPHET_COMMIT_H

/* The commit the programs were built from: `git describe --always --dirty`
 * of the source tree at build time, "unknown" outside a git checkout.
 * Generated into the build directory (common/commit.c, Makefile.am). */
extern const char prophet_commit[];

#endif
