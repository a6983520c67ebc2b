#ifndef PROPHET_REDIS_H
#define PROPHET_REDIS_H

#include <stddef.h>

#include <hiredis/async.h>
#include <hiredis/hiredis.h>

#include "rargs.h"

struct event_base;
struct cfg;

/*
 * One hiredis async connection on the loop, to redis.url (AUTH [user]
 * password, with redis.password_file's, then SELECT; TLS for rediss://
 * where hiredis has it) and automatic reconnect (backoff up to 1 s). While
 * disconnected, commands are refused (-1) rather than queued, so callers
 * can fall back at once. A command's callback gets reply NULL if the
 * connection dropped under it. Creating one is fatal when the server
 * refuses the credentials (a server that is down is waited for). With
 * redis.sentinels, the server is the primary the Sentinels name, looked
 * up before every connect, checked with ROLE, and left at once on a
 * +switch-master heard from a Sentinel.
 */
struct redis;

/* The reader functions of the main connection: each reply object is one
 * allocation (its string or element vector inside), freed only through
 * this table's freeObject (hiredis does, after the callback); never
 * freeReplyObject(). Exposed for tests/unit/test_redis_reply.c. */
const redisReplyObjectFunctions *redis_reply_functions(void);

typedef void (*redis_state_fn)(struct redis *r, int up, void *arg);
typedef void (*redis_reply_fn)(struct redis *r, redisReply *reply, void *arg);

struct redis *redis_create(struct event_base *base, const struct cfg *cfg,
			   redis_state_fn state_cb, void *arg);
void redis_destroy(struct redis *r);
int redis_up(const struct redis *r);
/* Commands sent and not answered yet (a graceful stop waits for them: a
 * reply-less command still sitting in the output buffer would be lost). */
size_t redis_pending(const struct redis *r);
/* A command given as its arguments, each a NUL-terminated string, ended
 * by NULL: redis_commandl(r, cb, arg, "DEL", key, NULL). */
#define REDIS_COMMANDL_MAX 16
/* While Redis refuses writes (OOM, NOREPLICAS): a write of the caller's
 * own (SET key, 10 s TTL) whose answer tells when it takes them again. */
int redis_probe_write(struct redis *r, const char *key, redis_reply_fn cb,
		      void *arg);
int redis_commandl(struct redis *r, redis_reply_fn cb, void *arg, ...)
	__attribute__((sentinel));
int redis_command_argv(struct redis *r, redis_reply_fn cb, void *arg, int argc,
		       const char **argv, const size_t *argvlen);
/*
 * EVAL script numkeys ... (argv[0] "EVAL", argv[1] the script's text, which
 * must outlive the process: a string literal) sent as EVALSHA: the text
 * goes to the server once per connection (SCRIPT LOAD, ahead of the call
 * on the same connection), then only its SHA-1. A server that refuses
 * SCRIPT LOAD gets plain EVAL; one whose cache was flushed under a live
 * connection fails that call (NOSCRIPT, an error reply as any other) and
 * is sent the text again on the next.
 */
int redis_eval_argv(struct redis *r, redis_reply_fn cb, void *arg, int argc,
		    const char **argv, const size_t *argvlen);
/* The same with the arguments in a (proto/rindex.h builds them). */
int redis_eval_args(struct redis *r, redis_reply_fn cb, void *arg,
		    const struct redis_args *a);
/*
 * Makes r a subscriber of channel (r is then used for nothing else): cb
 * gets every published message's payload as a string reply, and the
 * subscription is renewed after every reconnect.
 */
void redis_subscribe(struct redis *r, const char *channel, redis_reply_fn cb,
		     void *arg);

/*
 * Sentinel mode (redis.sentinels): cb(r, 1, arg) when a connection
 * becomes usable to a different primary than the last one (or after a
 * +switch-master), i.e. after a failover, which may have lost the last
 * writes acknowledged by the old primary. Called before the state
 * callback says up, with the connection already usable for commands.
 */
void redis_on_failover(struct redis *r, redis_state_fn cb, void *arg);
/* Failovers r has seen. */
unsigned long redis_failovers(const struct redis *r);

#endif
