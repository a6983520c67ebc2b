#ifndef PROPHET_KAFKA_H
#define PROPHET_KAFKA_H

#include <stddef.h>
#include <stdint.h>

#include <librdkafka/rdkafka.h>

struct event_base;
struct cfg;

/* Longest Kafka topic name (the broker refuses longer ones). */
#define KAFKA_TOPIC_NAME_MAX 249

/*
 * Every client takes kafka.brokers, the security keys (security_protocol,
 * sasl_*, tls_*) and [kafka.client]; producers [kafka.producer] too,
 * consumers [kafka.consumer]. Creating one waits (at most a few seconds)
 * for the first broker to answer: a refused password or an untrusted
 * certificate is then an error (the daemons stop at start), brokers that
 * are down are not (they are waited for, as at any time).
 */

/*
 * Pass-through property key of section ([kafka.client], [kafka.producer],
 * [kafka.consumer]) may be set: -1 naming it if Prophet sets it itself,
 * a safety setting or what one of its keys sets.
 */
int kafka_passthrough_check(const char *section, const char *key, char *err,
			    size_t errlen);

/*
 * An idempotent librdkafka producer whose delivery reports are served on
 * the libevent loop (the main queue wakes the loop through a pipe).
 */
struct kafka_producer;

/* opaque is the value given to kafka_produce(). */
typedef void (*kafka_dr_fn)(void *opaque, rd_kafka_resp_err_t err, void *arg);

struct kafka_producer *kafka_producer_create(struct event_base *base,
					     const struct cfg *cfg,
					     kafka_dr_fn dr_cb, void *arg,
					     char *err, size_t errlen);
/* Flushes up to timeout_ms, then frees; undelivered reports fire with
 * an error. */
void kafka_producer_destroy(struct kafka_producer *p, int timeout_ms);
/* Raises a fatal error as the idempotent producer would (librdkafka's
 * test API), for the fault point kafka_producer_fatal. */
void kafka_producer_test_fatal(struct kafka_producer *p);
/* Tests: reads the wake-up pipe dry, as a missed wake-up would leave it;
 * the bytes read. */
size_t kafka_producer_test_steal_wakeup(struct kafka_producer *p);
/*
 * Queues a message; hdrs is taken over (freed on failure too). Returns -1
 * with *errp set if it was not queued (RD_KAFKA_RESP_ERR__QUEUE_FULL is the
 * back-pressure signal).
 */
/*
 * With kafka.create_topics: creates those of the n topics that do not exist
 * yet (the Admin API, through p's connections), with kafka.topic_partitions,
 * kafka.topic_replication and kafka.topic_min_insync, waiting timeout_ms at
 * most. Logs each topic created. Returns -1 with err when the brokers could
 * not be asked or refused (not allowed, bad settings): the topics may exist
 * all the same, or be made by an operator; a topic that exists is no error.
 */
int kafka_ensure_topics(struct kafka_producer *p, const struct cfg *cfg,
			const char *const *topics, size_t n, int timeout_ms,
			char *err, size_t errlen);
/*
 * Makes topic with parts partitions if it does not exist (whatever
 * kafka.create_topics says; replication and min.insync.replicas as
 * kafka_ensure_topics), then returns its partition count (-1 with err if
 * the brokers did not tell).
 */
int kafka_topic_ensure_parts(struct kafka_producer *p, const struct cfg *cfg,
			     const char *topic, int parts, int timeout_ms,
			     char *err, size_t errlen);

/*
 * A client for blocking metadata and Admin API calls from one thread (the
 * manager's task topic checks). It never makes a topic by asking about
 * it (allow.auto.create.topics=false). Created on the loop (it reads cfg
 * then, and never after), used on one other thread.
 */
struct kafka_admin;
struct kafka_admin *kafka_admin_create(const struct cfg *cfg, char *err,
				       size_t errlen);
void kafka_admin_destroy(struct kafka_admin *a);
/* 1: topic exists; 0: the brokers answered that it does not; -1: no
 * answer (brokers unreachable); -2: an answer that does not tell (not
 * authorized to describe it). err says why for -1 and -2. */
int kafka_admin_topic_exists(struct kafka_admin *a, const char *topic,
			     int timeout_ms, char *err, size_t errlen);
/* Creates topic as kafka_ensure_topics would, whatever
 * kafka.create_topics says; 0 also when it exists already. */
int kafka_admin_create_topic(struct kafka_admin *a, const char *topic,
			     int timeout_ms, char *err, size_t errlen);
int kafka_produce(struct kafka_producer *p, const char *topic, const void *key,
		  size_t keylen, const void *value, size_t valuelen,
		  rd_kafka_headers_t *hdrs, void *opaque,
		  rd_kafka_resp_err_t *errp);
/* A header whose value is v in decimal. */
void kafka_header_add_int(rd_kafka_headers_t *h, const char *name, long long v);
/* Messages queued or in flight. */
int kafka_outq_len(const struct kafka_producer *p);
/* Drops messages not yet sent (their reports fire with an error). */
void kafka_purge_queued(struct kafka_producer *p);
/* All brokers down (librdkafka said so, and its statistics have not shown
 * one up since). */
int kafka_brokers_down(const struct kafka_producer *p);
/* Messages have waited 5 s without a delivery report: the brokers hang
 * (for /readyz; logged as "kafka not acknowledging"). */
int kafka_stalled(const struct kafka_producer *p);

/*
 * A consumer (group member) on a topic, or on several separated by commas
 * (a name starting with '^' is a regular expression), served on the loop: msg_cb gets
 * each message (borrowed for the call). Offsets are committed only by
 * kafka_consumer_commit(), which the caller runs once what it consumed is
 * durably handled. kafka_consumer_pause() stops fetching.
 */
struct kafka_consumer;
typedef void (*kafka_msg_fn)(const rd_kafka_message_t *m, void *arg);
/* Partitions given to this member (assigned 1) or taken from it (0, also
 * when they were lost); the list is borrowed for the call. */
typedef void (*kafka_rebalance_fn)(const rd_kafka_topic_partition_list_t *l,
				   int assigned, void *arg);

struct kafka_consumer_opts {
	/* librdkafka properties as key, value pairs ending with NULL, set
	 * before the [kafka.consumer] pass-through (which may override). */
	const char *const *props;
	/* Told of every assignment change (NULL: none). */
	kafka_rebalance_fn rebalance_cb;
	/* With kafka.static_membership: the listen address that, with the
	 * host name and role, makes the group.instance.id (NULL: a dynamic
	 * member). */
	const char *role;
	const char *listen;
};

/* "<role>.<host>.<listen>" in the characters Kafka allows in a
 * group.instance.id (others become '_'). */
void kafka_instance_id(char *buf, size_t len, const char *role,
		       const char *listen);

struct kafka_consumer *
kafka_consumer_create(struct event_base *base, const struct cfg *cfg,
		      const char *group, const char *topic, kafka_msg_fn msg_cb,
		      void *arg, char *err, size_t errlen);
/* The same with properties of its own and a rebalance callback (served
 * on the loop, from kafka_consumer_poll like the messages). */
struct kafka_consumer *kafka_consumer_create_opts(
	struct event_base *base, const struct cfg *cfg, const char *group,
	const char *topic, kafka_msg_fn msg_cb, void *arg,
	const struct kafka_consumer_opts *opts, char *err, size_t errlen);
void kafka_consumer_destroy(struct kafka_consumer *c);
/*
 * The same without blocking the loop: the consumer leaves its group on a
 * thread of its own (up to KAFKA_CLOSE_MS, in parallel with others).
 * kafka_consumer_wait_closed() waits for every such close (at exit).
 */
void kafka_consumer_destroy_async(struct kafka_consumer *c);
void kafka_consumer_wait_closed(void);
/* Delivers at most max messages now; returns how many. */
int kafka_consumer_poll(struct kafka_consumer *c, int max);
/* held=1: stop delivering (the caller has enough in hand); 0: resume. */
void kafka_consumer_hold(struct kafka_consumer *c, int held);
/*
 * paused=1: stop fetching the partitions assigned now and later, but keep
 * polling (group membership, rebalances); 0: fetch again. Unlike a hold,
 * the member stays within max.poll.interval.ms however long it lasts.
 */
void kafka_consumer_pause(struct kafka_consumer *c, int paused);
/* The last high watermark seen for a partition, or -1. */
int64_t kafka_consumer_high_watermark(struct kafka_consumer *c,
				      const char *topic, int32_t partition);
/* Marks (topic, partition, offset) handled; commits asynchronously, the
 * offsets of 100 ms in one request (and at once when partitions are
 * revoked or the consumer is destroyed). */
void kafka_consumer_commit(struct kafka_consumer *c, const char *topic,
			   int32_t partition, int64_t next_offset);

/*
 * A transactional producer for blocking use from one thread (the
 * manager's pruner, on its DB thread): the records of one
 * kafka_txn_send() are committed together or not at all, and creating one
 * with the same transactional id fences an older instance (its open
 * transaction is aborted, its later commits refused).
 */
struct kafka_txn;
struct kafka_rec {
	const char *topic; /* NULL: the topic of the kafka_txn_send() call */
	int pinned;	   /* 1: to pin_partition, 0: the partitioner's */
	int32_t pin_partition;
	const char *key;
	size_t keylen;
	const char *value;
	size_t valuelen;
	rd_kafka_headers_t *hdrs; /* taken over by kafka_txn_send() */
	int32_t partition;	  /* out: where it was committed */
	int64_t offset;
};
struct kafka_txn *kafka_txn_create(const struct cfg *cfg, const char *txn_id,
				   int timeout_ms, char *err, size_t errlen);
void kafka_txn_destroy(struct kafka_txn *t);
/* 0: every record committed (partition and offset set). -1: none was,
 * unless *fatal: then the outcome is unknown and the producer unusable
 * (destroy it; the next instance fences what it left). */
int kafka_txn_send(struct kafka_txn *t, const char *topic,
		   struct kafka_rec *recs, size_t n, int timeout_ms, int *fatal,
		   char *err, size_t errlen);
/*
 * Reads topic's committed records (read_committed) from from[p] (the next
 * offset of partition p; -1: not read; partitions beyond nfrom, added
 * since, from their beginning) to their end, calling cb for each; *ends
 * gets the end offset of every partition (a new array of *nends). The
 * end is each partition's high watermark when the call starts: a
 * transaction open then (which read_committed stops at) is waited for,
 * so every record committed before the call is read. With from NULL
 * nothing is read. Blocking, for one thread.
 */
int kafka_read_committed(const struct cfg *cfg, const char *topic,
			 const int64_t *from, int nfrom, kafka_msg_fn cb,
			 void *arg, int64_t **ends, int *nends, int timeout_ms,
			 char *err, size_t errlen);

#endif
