#ifndef PROPHET_ZK_H
#define PROPHET_ZK_H

#include <stddef.h>
#include <stdint.h>

#include <zookeeper/zookeeper.h>

struct event_base;
struct cfg;

/*
 * A zookeeper_mt session whose watcher events are handed to the libevent
 * loop: the client's own thread only enqueues and wakes the loop, and
 * event_cb runs on the loop thread. Synchronous calls on the handle are
 * allowed from the loop (they are few: a handful per rebalance).
 */
struct zk;

typedef void (*zk_event_fn)(struct zk *z, int type, int state, const char *path,
			    void *arg);

/*
 * A session to zookeeper.hosts. With zookeeper.auth_file ("user:password")
 * it authenticates (digest, again on every reconnect and new session) and
 * every node it creates gets zk_acl(): all rights for that identity, read
 * for everyone; without, nodes are open to anyone. A bad auth file is
 * fatal.
 */
struct zk *zk_create(struct event_base *base, const struct cfg *cfg,
		     zk_event_fn cb, void *arg);
void zk_destroy(struct zk *z);
/* Blocks until connected or timeout. 0 when connected. */
int zk_wait_connected(struct zk *z, int timeout_ms);
/* Closes an expired handle and opens a new session. */
int zk_reopen(struct zk *z);
zhandle_t *zk_handle(struct zk *z);
int zk_is_connected(struct zk *z);
/*
 * For /readyz: connected, or the connection lost less than 2/3 of the
 * session timeout ago with the session not expired (the client moving
 * to another server of the ensemble, an election, a server restarted):
 * the session lives on and the workers keep claiming that long (they
 * self-fence at 2/3), so a rolling restart of the ensemble does not
 * fail every daemon's readiness at once.
 */
int zk_is_ready(struct zk *z);

/*
 * Asynchronous calls: the completion runs on the loop thread. rc is the
 * ZooKeeper result (ZOK, ZNONODE, ZCONNECTIONLOSS, ...). watch=1 arms a
 * one-shot watch whose event arrives through the session's event_cb.
 * They return 0, or -1 if the call could not be sent (then no callback).
 */
typedef void (*zk_data_fn)(struct zk *z, int rc, const char *data, int len,
			   const struct Stat *st, void *arg);
typedef void (*zk_children_fn)(struct zk *z, int rc,
			       const struct String_vector *names, void *arg);
typedef void (*zk_string_fn)(struct zk *z, int rc, const char *value,
			     void *arg);
typedef void (*zk_stat_fn)(struct zk *z, int rc, const struct Stat *st,
			   void *arg);
typedef void (*zk_void_fn)(struct zk *z, int rc, void *arg);

int zk_aget(struct zk *z, const char *path, int watch, zk_data_fn cb,
	    void *arg);
int zk_aget_children(struct zk *z, const char *path, int watch,
		     zk_children_fn cb, void *arg);
int zk_aexists(struct zk *z, const char *path, int watch, zk_stat_fn cb,
	       void *arg);
int zk_acreate(struct zk *z, const char *path, const char *data, int flags,
	       zk_string_fn cb, void *arg);
int zk_aset(struct zk *z, const char *path, const char *data, int version,
	    zk_stat_fn cb, void *arg);
/* ops and results (and every buffer they point to) must stay valid until
 * cb runs. */
int zk_amulti(struct zk *z, int count, const zoo_op_t *ops,
	      zoo_op_result_t *results, zk_void_fn cb, void *arg);
/* The session id (changes when zk_reopen opens a new session). */
int64_t zk_session_id(struct zk *z);

/* The ACL of the nodes this session creates. */
struct ACL_vector *zk_acl(struct zk *z);
/* "user:<base64 SHA-1 of user:password>", the digest identity ZooKeeper
 * records for userpass ("user:password") in ACLs. out: 256 bytes. */
void zk_digest_id(const char *userpass, char *out, size_t outlen);
/*
 * Whether this session may change path (its ACL grants write to anyone,
 * or all rights to our identity): -1 with err saying which credentials
 * are missing or wrong. A node that does not exist passes.
 */
int zk_check_access(struct zk *z, const char *path, char *err, size_t errlen);
/*
 * Sets path's ACL to zk_acl() unless it has it already: 1 changed, 0
 * already so (or no such node), -1 with err (not ours to change).
 */
int zk_repair_acl(struct zk *z, const char *path, char *err, size_t errlen);

/* Creates path with data if it does not exist (ZNODEEXISTS is success). */
int zk_ensure(struct zk *z, const char *path, const char *data, int flags);
/* Reads a node into a new NUL-terminated string; NULL if absent/error
 * (*rc tells which). */
char *zk_get(struct zk *z, const char *path, struct Stat *st, int *rc);
const char *zk_state_name(int state);

#endif
