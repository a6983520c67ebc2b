#ifndef PROPHET_ZKNODE_H
#define PROPHET_ZKNODE_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/* The JSON of a /work_slot/ws_N node (CONTRACT.md):
 * {"slot":N,"owner":"<id>"|null,"requested":"<id>"|null,"epoch":E,
 *  "updated_at":ms}. Empty strings stand for null. */
#define ZKNODE_ID_MAX 128

struct slot_node {
	int slot;
	char owner[ZKNODE_ID_MAX];
	char requested[ZKNODE_ID_MAX];
	int64_t epoch;
	int64_t updated_at;
};

int slot_node_decode(const char *data, int len, struct slot_node *n);
/* A new string. */
char *slot_node_encode(const struct slot_node *n);

/*
 * The JSON of an ephemeral /workers/<id> node (CONTRACT.md):
 * {"id","host","pid","started_at","version","metrics"[,"metrics_tls":true]}
 * where metrics is host:port of the worker's metrics listener, read over
 * HTTPS when metrics_tls is true. Strings that are not valid UTF-8 (a
 * hostname is whatever bytes the system holds) are written with
 * replacement characters.
 */
struct worker_node {
	char id[ZKNODE_ID_MAX];
	char host[256];
	int64_t pid;
	int64_t started_at;
	char version[64];
	char metrics[320]; /* "" if the node has none */
	int metrics_tls;
};

/* -1 if data is not a JSON object with a string id; other members that are
 * missing or of another type are left empty. */
int worker_node_decode(const char *data, int len, struct worker_node *n);
/* A new string. */
char *worker_node_encode(const struct worker_node *n);
/* The same as a new object (the manager's GET /v1/cluster lists it). */
json_t *worker_node_json(const struct worker_node *n);

/*
 * Checks the /config node's data ({"slots":N,...}) against the configured
 * slot count; path names the node in the error.
 */
int cluster_config_verify(const char *data, int nslots, const char *path,
			  char *err, size_t errlen);

#endif
