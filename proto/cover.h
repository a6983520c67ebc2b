#ifndef PROPHET_COVER_H
#define PROPHET_COVER_H

#include <stddef.h>

#include <jansson.h>

/*
 * Which Kafka topics a notifier consumes, as it announces them in its
 * ephemeral node <root>/notifiers/<id> and as the manager checks a
 * callback task's topic against them. The node's JSON:
 *   {"id":"<notifier id>","group":"<consumer group>",
 *    "topics":["<Kafka topic>",...],"patterns":["^<regex>",...],
 *    "excluded":["<Kafka topic>",...],"at":<ms>}
 * topics are consumed by name, patterns are librdkafka subscription
 * regexes (POSIX extended syntax, which is what they are written in),
 * excluded topics are skipped even when a pattern matches them (Prophet's
 * own: dead letters, archive, ingest).
 */
struct cover;

/*
 * The subscription pattern that covers every task topic: ^<prefix>.*
 * with the prefix's dots escaped; without a prefix ^[^_].* (Kafka's own
 * topics, __consumer_offsets and the like, begin with _). A new string.
 */
char *cover_default_pattern(const char *prefix);

/* A parsed node (its regexes compiled); NULL with err if it is not one. */
struct cover *cover_parse(const char *data, size_t len, char *err,
			  size_t errlen);
void cover_free(struct cover *c);
/* Whether the notifier of c consumes the Kafka topic ktopic. */
int cover_covers(const struct cover *c, const char *ktopic);
/* The node as it was parsed (borrowed). */
const json_t *cover_json(const struct cover *c);

#endif
