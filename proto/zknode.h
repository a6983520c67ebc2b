#ifndef PROPHET_ZKNODE_H
#define PROPHET_ZKNODE_H

#include <stddef.h>
#include <stdint.h>

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
 * Checks the /config node's data ({"slots":N,...}) against the configured
 * slot count; path names the node in the error.
 */
int cluster_config_verify(const char *data, int nslots, const char *path,
			  char *err, size_t errlen);

#endif
