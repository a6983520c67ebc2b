#ifndef PROPHET_MARKER_H
#define PROPHET_MARKER_H

#include <stddef.h>
#include <stdint.h>

#include "task.h"

/*
 * Exactly-once publishing (kafka.exactly_once): the marker record a
 * worker writes for every task it publishes, in the same Kafka
 * transaction as the task's record, to the worker's partition of the
 * marker topic (partition <slot> before migration 11). The key is the
 * task id (whose hash gives the slot); the value is
 *
 *   "1 <due_at> <fired_at> <attempt> <epoch> <flags>"
 *
 * (decimal, one space apart; flags: 1 recurring, 2 misfired). A new owner
 * of the slot reads these records (read_committed) to learn which tasks
 * were published but not yet recorded delivered in the database.
 */
struct marker {
	char id[TASK_ID_MAX + 1];
	int64_t due_at;
	int64_t fired_at;
	int64_t epoch;
	int attempt;
	int recurring;
	int misfired;
};

/* Room for any value marker_encode() writes. */
#define MARKER_VALUE_MAX 96

/* Writes m's value into buf (MARKER_VALUE_MAX bytes); returns its length. */
size_t marker_encode(const struct marker *m, char *buf);
/* 0 when key and value make a marker; -1 otherwise (m undefined). */
int marker_decode(const char *key, size_t keylen, const char *value,
		  size_t valuelen, struct marker *m);
/* s in the characters Kafka allows in names (others become '_'), '/' as
 * '.', leading '/' dropped, cut to len. */
void marker_kafka_name(char *buf, size_t len, const char *s);
/* The marker topic's Kafka name: eos_topic (kafka.eos_topic) when set, else
 * <prefix><root>.fired (root as marker_kafka_name makes it, "prophet" when
 * that is empty); -1 when it does not fit in len. */
int marker_topic(char *buf, size_t len, const char *eos_topic,
		 const char *prefix, const char *root);

#endif
