#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <fcntl.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "cfg.h"
#include "daemon.h"
#include "kafka.h"
#include "log.h"
#include "num.h"
#include "secret.h"
#include "xmalloc.h"

#define KAFKA_CLOSE_MS 5000
/* How long offsets to commit are gathered before one request sends them
 * all (kafka_consumer_commit). */
#define KAFKA_COMMIT_MS 100
/* How long creating a client waits for a broker's first answer. */
#define KAFKA_PROBE_MS 10000
#define KAFKA_PROBE_DOWN_MS 1500

/* librdkafka properties Prophet sets, and why a pass-through may not. */
enum { FOR_ALL = 3, FOR_PRODUCER = 1, FOR_CONSUMER = 2 };
static const struct {
	const char *name;
	int kinds;
	const char *why;
} kafka_own[] = {
	{"bootstrap.servers", FOR_ALL, "set with kafka.brokers"},
	{"metadata.broker.list", FOR_ALL, "set with kafka.brokers"},
	{"security.protocol", FOR_ALL, "set with kafka.security_protocol"},
	{"sasl.mechanism", FOR_ALL, "set with kafka.sasl_mechanism"},
	{"sasl.mechanisms", FOR_ALL, "set with kafka.sasl_mechanism"},
	{"sasl.username", FOR_ALL, "set with kafka.sasl_username"},
	{"sasl.password", FOR_ALL, "set with kafka.sasl_password_file"},
	{"ssl.ca.location", FOR_ALL, "set with kafka.tls_ca"},
	{"ssl.certificate.location", FOR_ALL, "set with kafka.tls_cert"},
	{"ssl.key.location", FOR_ALL, "set with kafka.tls_key"},
	{"enable.idempotence", FOR_PRODUCER,
	 "a safety setting: no duplicates or reordering on retries"},
	{"acks", FOR_PRODUCER,
	 "a safety setting: acks=all, a message is delivered once every "
	 "in-sync replica has it"},
	{"request.required.acks", FOR_PRODUCER,
	 "a safety setting: acks=all, a message is delivered once every "
	 "in-sync replica has it"},
	{"message.timeout.ms", FOR_PRODUCER,
	 "a safety setting: 0, a message waits for Kafka however long it is "
	 "down, never dropped"},
	{"delivery.timeout.ms", FOR_PRODUCER,
	 "a safety setting: 0, a message waits for Kafka however long it is "
	 "down, never dropped"},
	{"linger.ms", FOR_PRODUCER, "set with kafka.linger_ms"},
	{"queue.buffering.max.ms", FOR_PRODUCER, "set with kafka.linger_ms"},
	{"queue.buffering.max.messages", FOR_PRODUCER,
	 "set with kafka.queue_max"},
	{"statistics.interval.ms", FOR_PRODUCER,
	 "Prophet reads the statistics to tell that brokers are back"},
	{"group.id", FOR_CONSUMER,
	 "set with kafka.ingest_group or notifier.group"},
	{"enable.auto.commit", FOR_CONSUMER,
	 "a safety setting: offsets are committed once what was read is "
	 "handled (at-least-once)"},
	{"enable.auto.offset.store", FOR_CONSUMER,
	 "a safety setting: offsets are committed once what was read is "
	 "handled (at-least-once)"},
	{"auto.offset.reset", FOR_CONSUMER,
	 "a safety setting: a new group starts at the earliest message, "
	 "nothing is skipped"},
};

int
kafka_passthrough_check(const char *section, const char *key, char *err,
			size_t errlen)
{
	int kind = !strcmp(section, "kafka.producer")	? FOR_PRODUCER
		   : !strcmp(section, "kafka.consumer") ? FOR_CONSUMER
							: FOR_ALL;

	for (size_t i = 0; i < sizeof(kafka_own) / sizeof(kafka_own[0]); i++) {
		if (strcmp(key, kafka_own[i].name) ||
		    !(kafka_own[i].kinds & kind))
			continue;
		snprintf(err, errlen,
			 "%s.%s: Prophet sets it itself (%s); it cannot be "
			 "overridden",
			 section, key, kafka_own[i].why);
		return -1;
	}
	return 0;
}

/* What the first answers of the brokers said, while a client is made. */
struct kafka_probe {
	int probing;
	int all_down;
	char failed[512]; /* authentication or TLS refused */
};

struct kafka_producer {
	rd_kafka_t *rk;
	rd_kafka_queue_t *mainq;
	struct event *ev;
	int pipefd[2];
	kafka_dr_fn dr_cb;
	void *arg;
	int all_down;
	struct kafka_probe probe;
	/* A fatal error (the idempotent producer's sequence lost, its id
	 * fenced) ends a handle for good: it is made again from conf
	 * (producer_remake). */
	rd_kafka_conf_t *conf;
	struct event *remake_ev;
	int fatal;
	unsigned long remakes;
	/* A poll every second beside the wake-up pipe (see tick_cb). */
	struct event *tick_ev;
	int ticking;
	unsigned long tick_served;
	int64_t tick_warned_ms;
	/* When the brokers last acknowledged a message (a delivery report),
	 * or the queue went from empty to not; when they stopped. */
	int64_t acked_ms;
	int64_t stalled_since_ms;
};

/* A refusal no retry will change: a password, a certificate. */
static int
is_auth_error(int err)
{
	return err == RD_KAFKA_RESP_ERR__AUTHENTICATION ||
	       err == RD_KAFKA_RESP_ERR__SSL ||
	       err == RD_KAFKA_RESP_ERR_SASL_AUTHENTICATION_FAILED ||
	       err == RD_KAFKA_RESP_ERR_ILLEGAL_SASL_STATE ||
	       err == RD_KAFKA_RESP_ERR_UNSUPPORTED_SASL_MECHANISM;
}

/* Called from error callbacks: 1 if the probe took the error. */
static int
probe_error(struct kafka_probe *pr, int err, const char *reason)
{
	if (!pr->probing)
		return 0;
	/* A certificate refused while the handshake reads is reported as a
	 * transport error; the next attempt's as _SSL. */
	if (err == RD_KAFKA_RESP_ERR__TRANSPORT &&
	    strstr(reason, "certificate verify failed") != NULL)
		err = RD_KAFKA_RESP_ERR__SSL;
	if (is_auth_error(err) && pr->failed[0] == '\0')
		snprintf(pr->failed, sizeof(pr->failed), "%s: %s",
			 err == RD_KAFKA_RESP_ERR__SSL ? "TLS"
						       : "authentication",
			 reason);
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
		pr->all_down = 1;
	return 1;
}

/* librdkafka before 2.6.1 sends a SCRAM proof Kafka 4 brokers refuse
 * (confluentinc/librdkafka#4895): a correct password fails too. */
static const char *
scram_hint(const struct cfg *cfg)
{
	if (strncasecmp(cfg_str(cfg, CFG_KAFKA_SECURITY_PROTOCOL), "sasl_",
			5) ||
	    strncmp(cfg_str(cfg, CFG_KAFKA_SASL_MECHANISM), "SCRAM", 5) ||
	    rd_kafka_version() >= 0x020601ff)
		return "";
	return "; this librdkafka (before 2.6.1) cannot do SCRAM with Kafka 4 "
	       "brokers: use kafka.sasl_mechanism PLAIN (inside sasl_ssl), see "
	       "docs/security.md";
}

/*
 * Serves rk's main queue until a broker answers a metadata request, one
 * refuses the credentials or the certificate (-1), every broker is
 * unreachable for KAFKA_PROBE_DOWN_MS or KAFKA_PROBE_MS pass (0: degraded, the brokers are waited
 * for later).
 */
static int
probe_run(rd_kafka_t *rk, struct kafka_probe *pr, const struct cfg *cfg,
	  char *err, size_t errlen)
{
	int64_t until = clock_mono_ms() + KAFKA_PROBE_MS, down_at = 0;
	const struct rd_kafka_metadata *md;
	int rc = 0;

	pr->probing = 1;
	for (;;) {
		rd_kafka_poll(rk, 50);
		if (pr->failed[0] != '\0') {
			snprintf(err, errlen,
				 "kafka refused the connection: %s (check "
				 "kafka.security_protocol %s, "
				 "kafka.sasl_username "
				 "'%s' and its kafka.sasl_password_file, "
				 "kafka.tls_ca)%s",
				 pr->failed,
				 cfg_str(cfg, CFG_KAFKA_SECURITY_PROTOCOL),
				 cfg_str(cfg, CFG_KAFKA_SASL_USERNAME),
				 scram_hint(cfg));
			rc = -1;
			break;
		}
		if (rd_kafka_metadata(rk, 0, NULL, &md, 200) ==
		    RD_KAFKA_RESP_ERR_NO_ERROR) {
			rd_kafka_metadata_destroy(md);
			break;
		}
		rd_kafka_poll(rk, 0);
		if (pr->failed[0] != '\0')
			continue;
		/* Every broker down after one attempt each: a second
		 * attempt (reconnect.backoff.ms later) may yet say why. */
		if (pr->all_down && down_at == 0)
			down_at = clock_mono_ms();
		if ((down_at != 0 &&
		     clock_mono_ms() >= down_at + KAFKA_PROBE_DOWN_MS) ||
		    clock_mono_ms() >= until) {
			log_warn("kafka brokers not answering at start; "
				 "waiting for them",
				 "brokers=%s", cfg_str(cfg, CFG_KAFKA_BROKERS));
			break;
		}
	}
	pr->probing = 0;
	return rc;
}

static void
dr_msg_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	struct kafka_producer *p = opaque;

	if (p->ticking)
		p->tick_served++;
	p->acked_ms = clock_mono_ms();
	if (p->stalled_since_ms != 0) {
		log_info("kafka acknowledging again", "stalled_ms=%lld",
			 (long long)(p->acked_ms - p->stalled_since_ms));
		p->stalled_since_ms = 0;
	}
	p->dr_cb(m->_private, m->err, p->arg);
}

static void
error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	struct kafka_producer *p = opaque;

	if (probe_error(&p->probe, err, reason)) {
		if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN)
			p->all_down = 1;
		return;
	}
	if (is_auth_error(err)) {
		log_error("kafka refused the connection",
			  "code=%s reason=\"%s\"", rd_kafka_err2name(err),
			  reason);
		return;
	}
	if (err == RD_KAFKA_RESP_ERR__ALL_BROKERS_DOWN) {
		if (!p->all_down)
			log_warn("kafka brokers down", "reason=\"%s\"", reason);
		p->all_down = 1;
		return;
	}
	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		char buf[512];

		rd_kafka_fatal_error(rk, buf, sizeof(buf));
		log_error("kafka producer failed for good: making it again",
			  "reason=\"%s\"", buf);
		/* Not from inside the handle's own poll. */
		if (!p->fatal && p->remake_ev != NULL)
			event_active(p->remake_ev, EV_TIMEOUT, 0);
		p->fatal = 1;
		return;
	}
	log_warn("kafka error", "code=%s reason=\"%s\"", rd_kafka_err2name(err),
		 reason);
}

/* Statistics, every second: the only report of brokers coming back, so
 * read only while they are all down (parsing them cost 1.3M instructions
 * a second). */
static int
stats_cb(rd_kafka_t *rk, char *json, size_t len, void *opaque)
{
	struct kafka_producer *p = opaque;
	json_t *j, *b;
	const char *name;
	int up = 0;

	if (!p->all_down)
		return 0;
	j = json_loadb(json, len, 0, NULL);
	json_object_foreach (json_object_get(j, "brokers"), name, b) {
		const char *st = json_string_value(json_object_get(b, "state"));

		if (st != NULL && !strcmp(st, "UP") &&
		    json_integer_value(json_object_get(b, "nodeid")) >= 0)
			up = 1;
	}
	json_decref(j);
	if (up && p->all_down) {
		p->all_down = 0;
		log_info("kafka brokers up again", "");
	}
	return 0;
}

static void
log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf)
{
	if (level <= 3)
		log_error("librdkafka", "facility=%s text=\"%s\"", fac, buf);
	else if (level <= 4)
		log_warn("librdkafka", "facility=%s text=\"%s\"", fac, buf);
	else
		log_debug("librdkafka", "facility=%s text=\"%s\"", fac, buf);
}

/* Reads a wake-up pipe dry; the bytes read. */
static size_t
pipe_drain(int fd)
{
	char buf[256];
	ssize_t n;
	size_t got = 0;

	while ((n = read(fd, buf, sizeof(buf))) > 0)
		got += (size_t)n;
	return got;
}

static void
wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kafka_producer *p = arg;

	pipe_drain(fd);
	rd_kafka_poll(p->rk, 0);
}

/* Messages queued and no delivery report for this long: the brokers hang
 * (a stopped process, a stuck disk) while the connections stay up, which
 * librdkafka reports only at its request timeout. */
#define KAFKA_STALL_MS 5000

static int64_t
stalled_ms(const struct kafka_producer *p)
{
	if (p->rk == NULL || rd_kafka_outq_len(p->rk) == 0)
		return 0;
	return clock_mono_ms() - p->acked_ms;
}

static void
stall_check(struct kafka_producer *p)
{
	int64_t d = stalled_ms(p);

	/* Brokers known down say so themselves ("kafka brokers down"). */
	if (d < KAFKA_STALL_MS || p->stalled_since_ms != 0 || p->all_down)
		return;
	p->stalled_since_ms = clock_mono_ms() - d;
	log_warn("kafka not acknowledging", "waited_ms=%lld outq=%d",
		 (long long)d, rd_kafka_outq_len(p->rk));
}

/*
 * The main queue wakes the loop through the pipe only when it turns
 * non-empty. A chaos run once had a worker, woken from SIGSTOP, with 84
 * messages in Kafka and none of their reports served for 75 s (cause not
 * found). A poll every second bounds such a stall to a second, and says
 * so when it finds reports the pipe did not announce.
 */
static void
tick_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kafka_producer *p = arg;
	int announced;

	(void)fd;
	(void)what;
	if (p->rk == NULL || rd_kafka_outq_len(p->rk) == 0)
		return;
	stall_check(p);
	announced = pipe_drain(p->pipefd[0]) > 0;
	p->ticking = 1;
	p->tick_served = 0;
	rd_kafka_poll(p->rk, 0);
	p->ticking = 0;
	if (p->tick_served > 0 && !announced &&
	    clock_mono_ms() - p->tick_warned_ms >= 60000) {
		p->tick_warned_ms = clock_mono_ms();
		log_warn("kafka delivery reports found by the 1 s poll, not "
			 "announced by the wake-up pipe",
			 "reports=%lu", p->tick_served);
	}
}

static int
set(rd_kafka_conf_t *conf, const char *k, const char *v, char *err,
    size_t errlen)
{
	if (rd_kafka_conf_set(conf, k, v, err, errlen) != RD_KAFKA_CONF_OK)
		return -1;
	return 0;
}

/* The properties of one pass-through section. */
static int
set_section(rd_kafka_conf_t *conf, const struct cfg *cfg, const char *section,
	    char *err, size_t errlen)
{
	size_t n = cfg_extra_count(cfg, section);

	for (size_t i = 0; i < n; i++) {
		const char *k, *v;
		char why[256];

		cfg_extra_get(cfg, section, i, &k, &v);
		if (kafka_passthrough_check(section, k, err, errlen) < 0)
			return -1;
		if (set(conf, k, v, why, sizeof(why))) {
			snprintf(err, errlen, "%s.%s: %s", section, k, why);
			return -1;
		}
	}
	return 0;
}

/* kafka.security_protocol, sasl_* and tls_*: with an error naming the
 * key that is missing or wrong. */
static int
set_security(rd_kafka_conf_t *conf, const struct cfg *cfg, char *err,
	     size_t errlen)
{
	const char *proto = cfg_str(cfg, CFG_KAFKA_SECURITY_PROTOCOL);
	const char *mech = cfg_str(cfg, CFG_KAFKA_SASL_MECHANISM);
	static const struct {
		enum cfg_id id;
		const char *prop;
	} files[] = {{CFG_KAFKA_TLS_CA, "ssl.ca.location"},
		     {CFG_KAFKA_TLS_CERT, "ssl.certificate.location"},
		     {CFG_KAFKA_TLS_KEY, "ssl.key.location"}};
	char why[256];
	char *pw;
	int rc;

	if (set(conf, "security.protocol", proto, why, sizeof(why))) {
		snprintf(err, errlen, "kafka.security_protocol: %s", why);
		return -1;
	}
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
		const char *v = cfg_str(cfg, files[i].id);

		if (v[0] != '\0' &&
		    set(conf, files[i].prop, v, why, sizeof(why))) {
			snprintf(err, errlen, "kafka.%s: %s", files[i].prop,
				 why);
			return -1;
		}
	}
	if (strncasecmp(proto, "sasl_", 5))
		return 0;
	if (cfg_str(cfg, CFG_KAFKA_SASL_USERNAME)[0] == '\0' ||
	    cfg_str(cfg, CFG_KAFKA_SASL_PASSWORD_FILE)[0] == '\0') {
		snprintf(err, errlen,
			 "kafka.security_protocol is %s: kafka.sasl_username "
			 "and kafka.sasl_password_file are needed (in [kafka], "
			 "or [kafka@<program>] for a principal per program)",
			 proto);
		return -1;
	}
	pw = cfg_secret(cfg, CFG_KAFKA_SASL_PASSWORD_FILE, err, errlen);
	if (pw == NULL)
		return -1;
	rc = set(conf, "sasl.mechanism", mech, why, sizeof(why)) ||
	     set(conf, "sasl.username", cfg_str(cfg, CFG_KAFKA_SASL_USERNAME),
		 why, sizeof(why)) ||
	     set(conf, "sasl.password", pw, why, sizeof(why));
	secret_free(pw);
	if (rc) {
		snprintf(err, errlen, "kafka.sasl_*: %s", why);
		return -1;
	}
	if (!strcasecmp(proto, "sasl_plaintext") && !strcmp(mech, "PLAIN"))
		log_warn("kafka: PLAIN over sasl_plaintext sends the password "
			 "in clear text: use sasl_ssl",
			 "user=%s", cfg_str(cfg, CFG_KAFKA_SASL_USERNAME));
	return 0;
}

/*
 * What every client has: brokers, security, [kafka.client]. No Nagle:
 * over TLS a request leaves in several records, and Nagle's wait for the
 * ACK of the first (which the broker delays) added 20-40 ms to every
 * produce (scripts/bench --secure: p50 25 ms instead of 3).
 */
static int
set_common(rd_kafka_conf_t *conf, const struct cfg *cfg, char *err,
	   size_t errlen)
{
	if (set(conf, "bootstrap.servers", cfg_str(cfg, CFG_KAFKA_BROKERS), err,
		errlen) ||
	    set(conf, "socket.nagle.disable", "true", err, errlen) ||
	    set_security(conf, cfg, err, errlen) < 0 ||
	    set_section(conf, cfg, "kafka.client", err, errlen) < 0)
		return -1;
	return 0;
}

void
kafka_header_add_int(rd_kafka_headers_t *h, const char *name, long long v)
{
	char buf[NUM_LL_MAX];
	size_t n = num_format_ll(buf, v);

	rd_kafka_header_add(h, name, -1, buf, (ssize_t)n);
}

static void destroy_handle_async(rd_kafka_t *rk);

/*
 * After a fatal error: every message of the old handle gets its delivery
 * report here, on the loop (purged: the owner fires them again, at least
 * once; an in-flight one may have been written too), so nothing waits for
 * a report that would never come; then the handle is destroyed off the
 * loop and a new one is made from the same configuration (a new producer
 * id and sequence). Until it exists, kafka_brokers_down() says so, which
 * holds claims back.
 */
static void
producer_remake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kafka_producer *p = arg;
	char err[512];
	int64_t until = clock_mono_ms() + 2000;
	rd_kafka_conf_t *conf;
	rd_kafka_t *rk;

	(void)fd;
	(void)what;
	if (p->rk != NULL) {
		rd_kafka_queue_io_event_enable(p->mainq, -1, NULL, 0);
		rd_kafka_queue_destroy(p->mainq);
		p->mainq = NULL;
		rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE |
					      RD_KAFKA_PURGE_F_INFLIGHT);
		do
			rd_kafka_poll(p->rk, 50);
		while (rd_kafka_outq_len(p->rk) > 0 && clock_mono_ms() < until);
		if (rd_kafka_outq_len(p->rk) > 0)
			log_error("kafka producer: reports still missing at "
				  "its end",
				  "outq=%d", rd_kafka_outq_len(p->rk));
		destroy_handle_async(p->rk);
		p->rk = NULL;
	}
	conf = rd_kafka_conf_dup(p->conf);
	rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof(err));
	if (rk == NULL) {
		struct timeval tv = {1, 0};

		rd_kafka_conf_destroy(conf); /* rd_kafka_new keeps it only
					      * when it succeeds */
		log_error("kafka producer not made again: retrying in 1 s",
			  "error=\"%s\"", err);
		evtimer_add(p->remake_ev, &tv);
		return;
	}
	p->rk = rk;
	p->fatal = 0;
	p->all_down = 0;
	p->remakes++;
	p->mainq = rd_kafka_queue_get_main(p->rk);
	rd_kafka_queue_io_event_enable(p->mainq, p->pipefd[1], "1", 1);
	log_info("kafka producer made again", "remakes=%lu", p->remakes);
}

struct kafka_producer *
kafka_producer_create(struct event_base *base, const struct cfg *cfg,
		      kafka_dr_fn dr_cb, void *arg, char *err, size_t errlen)
{
	struct kafka_producer *p = xcalloc(1, sizeof(*p));
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	char num[32];

	p->dr_cb = dr_cb;
	p->arg = arg;
	snprintf(num, sizeof(num), "%lld",
		 (long long)cfg_int(cfg, CFG_KAFKA_LINGER_MS));
	if (set_common(conf, cfg, err, errlen) < 0 ||
	    set(conf, "enable.idempotence", "true", err, errlen) ||
	    set(conf, "acks", "all", err, errlen) ||
	    set(conf, "linger.ms", num, err, errlen) ||
	    set(conf, "message.timeout.ms", "0", err, errlen) ||
	    set(conf, "socket.keepalive.enable", "true", err, errlen) ||
	    set(conf, "reconnect.backoff.max.ms", "1000", err, errlen))
		goto fail;
	snprintf(num, sizeof(num), "%lld",
		 (long long)cfg_int(cfg, CFG_KAFKA_QUEUE_MAX));
	if (set(conf, "queue.buffering.max.messages", num, err, errlen) ||
	    set_section(conf, cfg, "kafka.producer", err, errlen) < 0)
		goto fail;
	rd_kafka_conf_set_opaque(conf, p);
	rd_kafka_conf_set_dr_msg_cb(conf, dr_msg_cb);
	rd_kafka_conf_set_error_cb(conf, error_cb);
	rd_kafka_conf_set_log_cb(conf, log_cb);
	rd_kafka_conf_set_stats_cb(conf, stats_cb);
	if (set(conf, "statistics.interval.ms", "1000", err, errlen))
		goto fail;
	p->conf = rd_kafka_conf_dup(conf);
	p->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, errlen);
	if (p->rk == NULL) {
		rd_kafka_conf_destroy(p->conf);
		xfree(p);
		return NULL;
	}
	if (probe_run(p->rk, &p->probe, cfg, err, errlen) < 0) {
		rd_kafka_destroy(p->rk);
		rd_kafka_conf_destroy(p->conf);
		xfree(p);
		return NULL;
	}
	if (pipe2(p->pipefd, O_NONBLOCK | O_CLOEXEC) < 0)
		log_fatal("pipe failed", "");
	p->mainq = rd_kafka_queue_get_main(p->rk);
	rd_kafka_queue_io_event_enable(p->mainq, p->pipefd[1], "1", 1);
	p->ev = event_new(base, p->pipefd[0], EV_READ | EV_PERSIST, wake_cb, p);
	event_add(p->ev, NULL);
	p->remake_ev = evtimer_new(base, producer_remake_cb, p);
	{
		struct timeval second = {1, 0};

		p->tick_ev = event_new(base, -1, EV_PERSIST, tick_cb, p);
		event_add(p->tick_ev, &second);
	}
	return p;
fail:
	rd_kafka_conf_destroy(conf);
	xfree(p);
	return NULL;
}

void
kafka_producer_destroy(struct kafka_producer *p, int timeout_ms)
{
	if (p == NULL)
		return;
	if (p->rk != NULL) {
		rd_kafka_flush(p->rk, timeout_ms);
		rd_kafka_queue_io_event_enable(p->mainq, -1, NULL, 0);
		rd_kafka_queue_destroy(p->mainq);
		/* Reports for what is still queued fire from purge with an
		 * error. */
		rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE |
					      RD_KAFKA_PURGE_F_INFLIGHT);
		rd_kafka_poll(p->rk, 0);
		rd_kafka_destroy(p->rk);
	}
	event_free(p->ev);
	event_free(p->remake_ev);
	event_free(p->tick_ev);
	rd_kafka_conf_destroy(p->conf);
	close(p->pipefd[0]);
	close(p->pipefd[1]);
	xfree(p);
}

size_t
kafka_producer_test_steal_wakeup(struct kafka_producer *p)
{
	return pipe_drain(p->pipefd[0]);
}

void
kafka_producer_test_fatal(struct kafka_producer *p)
{
	if (p->rk != NULL)
		rd_kafka_test_fatal_error(
			p->rk, RD_KAFKA_RESP_ERR_OUT_OF_ORDER_SEQUENCE_NUMBER,
			"fault point kafka_producer_fatal");
}

int
kafka_produce(struct kafka_producer *p, const char *topic, const void *key,
	      size_t keylen, const void *value, size_t valuelen,
	      rd_kafka_headers_t *hdrs, void *opaque, rd_kafka_resp_err_t *errp)
{
	rd_kafka_resp_err_t e;

	if (p->rk == NULL || p->fatal) { /* being made again */
		rd_kafka_headers_destroy(hdrs);
		*errp = RD_KAFKA_RESP_ERR__FATAL;
		return -1;
	}
	if (rd_kafka_outq_len(p->rk) == 0)
		p->acked_ms = clock_mono_ms();
	e = rd_kafka_producev(p->rk, RD_KAFKA_V_TOPIC(topic),
			      RD_KAFKA_V_KEY(key, keylen),
			      RD_KAFKA_V_VALUE((void *)value, valuelen),
			      RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
			      RD_KAFKA_V_HEADERS(hdrs),
			      RD_KAFKA_V_OPAQUE(opaque), RD_KAFKA_V_END);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
		rd_kafka_headers_destroy(hdrs);
		*errp = e;
		return -1;
	}
	return 0;
}

int
kafka_outq_len(const struct kafka_producer *p)
{
	return p->rk != NULL ? rd_kafka_outq_len(p->rk) : 0;
}

void
kafka_purge_queued(struct kafka_producer *p)
{
	if (p->rk != NULL)
		rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE);
}

int
kafka_stalled(const struct kafka_producer *p)
{
	return stalled_ms(p) >= KAFKA_STALL_MS;
}

int
kafka_brokers_down(const struct kafka_producer *p)
{
	/* A handle being made again publishes nothing either. */
	return p->all_down || p->rk == NULL || p->fatal;
}

struct kafka_consumer {
	rd_kafka_t *rk;
	rd_kafka_queue_t *q;
	struct event *ev;
	int pipefd[2];
	kafka_msg_fn msg_cb;
	kafka_rebalance_fn rebalance_cb;
	void *arg;
	int held;   /* the caller has enough in hand: do not poll */
	int paused; /* fetching stopped, polling goes on */
	struct kafka_probe probe;
	/* What it is made of, to make it again after a fatal error
	 * (consumer_remake). */
	const struct cfg *cfg;
	char *group, *topic, *role, *listen;
	char **props; /* key, value, ..., NULL */
	int fatal;    /* librdkafka said so: made again on the next poll */
	struct event *remake_ev;
	/* Offsets to commit, gathered for KAFKA_COMMIT_MS (commit_flush). */
	rd_kafka_topic_partition_list_t *to_commit;
	struct event *commit_ev;
	int is_static;	      /* a static member (group.instance.id) */
	int sub_checked;      /* this handle's first assignment was checked */
	struct event *sub_ev; /* sub_check_cb */
};

static void
consumer_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
	struct kafka_consumer *c = opaque;

	if (err == RD_KAFKA_RESP_ERR__FATAL) {
		/* Served on the loop (the consumer's poll): the handle is
		 * made again there. */
		c->fatal = 1;
		if (c->ev != NULL)
			event_active(c->ev, EV_READ, 0);
	}
	if (probe_error(&c->probe, err, reason))
		return;
	if (is_auth_error(err))
		log_error("kafka refused the consumer's connection",
			  "code=%s reason=\"%s\"", rd_kafka_err2name(err),
			  reason);
	else
		log_warn("kafka consumer error", "code=%s reason=\"%s\"",
			 rd_kafka_err2name(err), reason);
}

static void
consumer_wake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kafka_consumer *c = arg;

	pipe_drain(fd);
	if (!c->held)
		kafka_consumer_poll(c, 1000);
}

void
kafka_consumer_hold(struct kafka_consumer *c, int held)
{
	c->held = held;
	/* Polled from the loop, not from inside the caller's work. */
	if (!held)
		event_active(c->ev, EV_READ, 0);
}

/* Pauses or resumes fetching the partitions of l (NULL: the assignment). */
static void
pause_parts(struct kafka_consumer *c, rd_kafka_topic_partition_list_t *l,
	    int paused)
{
	rd_kafka_topic_partition_list_t *mine = NULL;

	if (c->rk == NULL)
		return;
	if (l == NULL) {
		if (rd_kafka_assignment(c->rk, &mine) !=
		    RD_KAFKA_RESP_ERR_NO_ERROR)
			return;
		l = mine;
	}
	if (paused)
		rd_kafka_pause_partitions(c->rk, l);
	else
		rd_kafka_resume_partitions(c->rk, l);
	if (mine != NULL)
		rd_kafka_topic_partition_list_destroy(mine);
}

void
kafka_consumer_pause(struct kafka_consumer *c, int paused)
{
	if (c->paused == paused)
		return;
	c->paused = paused;
	pause_parts(c, NULL, paused);
	/* Polled from the loop, not from inside the caller's work. */
	if (!paused)
		event_active(c->ev, EV_READ, 0);
}

int64_t
kafka_consumer_high_watermark(struct kafka_consumer *c, const char *topic,
			      int32_t partition)
{
	int64_t lo, hi;

	if (c->rk == NULL)
		return -1;
	if (rd_kafka_get_watermark_offsets(c->rk, topic, partition, &lo, &hi) !=
		    RD_KAFKA_RESP_ERR_NO_ERROR ||
	    hi == RD_KAFKA_OFFSET_INVALID)
		return -1;
	return hi;
}

/* Applies a rebalance to the assignment (eager or cooperative). */
static void
rebalance_apply(rd_kafka_t *rk, rd_kafka_resp_err_t err,
		rd_kafka_topic_partition_list_t *l)
{
	int coop = !strcmp(rd_kafka_rebalance_protocol(rk), "COOPERATIVE");
	int assign = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;
	rd_kafka_error_t *e = NULL;

	if (coop && assign)
		e = rd_kafka_incremental_assign(rk, l);
	else if (coop && err == RD_KAFKA_RESP_ERR__REVOKE_PARTITIONS)
		e = rd_kafka_incremental_unassign(rk, l);
	else
		rd_kafka_assign(rk, assign ? l : NULL);
	if (e != NULL) {
		log_warn("kafka rebalance not applied", "error=\"%s\"",
			 rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
	}
}

/*
 * Sends the gathered offsets, every partition in one OffsetCommit
 * (asynchronous, as each commit was). One request a commit, sent as
 * messages were done, queued thousands deep on the coordinator's
 * connection when a consumer caught up with a backlog: the broker answers
 * a connection's requests one at a time, so the heartbeats behind them
 * went unanswered past the session timeout, the static member was fenced,
 * its commits refused, and it read the backlog again (the notifier on a dev
 * cluster with 8,700 old messages).
 */
static void
commit_drop(struct kafka_consumer *c)
{
	if (c->to_commit != NULL)
		rd_kafka_topic_partition_list_destroy(c->to_commit);
	c->to_commit = NULL;
}

static void
commit_flush(struct kafka_consumer *c)
{
	if (c->to_commit != NULL && c->rk != NULL && c->to_commit->cnt > 0)
		rd_kafka_commit(c->rk, c->to_commit, 1);
	commit_drop(c);
}

static void
commit_timer_cb(evutil_socket_t fd, short what, void *arg)
{
	(void)fd;
	(void)what;
	commit_flush(arg);
}

/* The subscription as librdkafka takes it: a topic each comma-separated
 * name (a regular expression when it starts with '^'). */
static rd_kafka_topic_partition_list_t *
subscription_list(const char *topic)
{
	rd_kafka_topic_partition_list_t *l =
		rd_kafka_topic_partition_list_new(1);

	for (const char *p = topic; *p;) {
		size_t k = strcspn(p, ",");
		char *one = xstrndup(p, k);

		if (k > 0)
			rd_kafka_topic_partition_list_add(
				l, one, RD_KAFKA_PARTITION_UA);
		xfree(one);
		p += k + (p[k] == ',');
	}
	return l;
}

/* Whether a topic's name is one the subscription names. */
static int
subscribed(const rd_kafka_topic_partition_list_t *sub, const regex_t *re,
	   const char *name)
{
	for (int i = 0; i < sub->cnt; i++) {
		if (sub->elems[i].topic[0] == '^') {
			if (regexec(&re[i], name, 0, NULL, 0) == 0)
				return 1;
		} else if (!strcmp(sub->elems[i].topic, name)) {
			return 1;
		}
	}
	return 0;
}

/*
 * A static member that rejoins under its name gets its old assignment
 * without a rebalance (Kafka), even when its regular expression now
 * matches a topic created while it was away (or a topic it names came to
 * be); librdkafka 2.0.2 (no KIP-814
 * skipAssignment) does not ask for one, and the topic stayed unread until
 * the group's next rebalance. So, once a handle has its first assignment:
 * a subscribed topic the brokers have and none of whose partitions came
 * to this member (with the range assignor every member gets some of each
 * topic that has as many partitions as there are members) makes it
 * subscribe again, which rejoins with its member id: the coordinator
 * rebalances on the leader's rejoin, and every member's new subscription
 * counts. At worst one rebalance more after a start. The metadata request
 * waits for the brokers for 1 s at most, once per handle.
 */
static void
sub_check_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kafka_consumer *c = arg;
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_partition_list_t *mine = NULL, *sub;
	regex_t *re;
	const char *missing = NULL;
	int nmissing = 0, ncomp;

	(void)fd;
	(void)what;
	if (c->rk == NULL)
		return;
	sub = subscription_list(c->topic);
	re = xcalloc((size_t)sub->cnt + 1, sizeof(*re));
	/* Up to the first pattern POSIX cannot compile (librdkafka's
	 * syntax is not quite POSIX's): then no check. */
	for (ncomp = 0; ncomp < sub->cnt; ncomp++)
		if (sub->elems[ncomp].topic[0] == '^' &&
		    regcomp(&re[ncomp], sub->elems[ncomp].topic,
			    REG_EXTENDED | REG_NOSUB) != 0)
			break;
	if (ncomp == sub->cnt && rd_kafka_assignment(c->rk, &mine) == 0 &&
	    rd_kafka_metadata(c->rk, 1, NULL, &md, 1000) == 0) {
		for (int t = 0; t < md->topic_cnt; t++) {
			const struct rd_kafka_metadata_topic *mt =
				&md->topics[t];
			int have = 0;

			if (mt->err != 0 || mt->partition_cnt == 0 ||
			    !subscribed(sub, re, mt->topic))
				continue;
			for (int i = 0; i < mine->cnt && !have; i++)
				have = !strcmp(mine->elems[i].topic, mt->topic);
			if (!have && nmissing++ == 0)
				missing = mt->topic;
		}
		if (nmissing > 0) {
			log_info("kafka consumer: subscribed topics not in its "
				 "assignment, asking for a rebalance",
				 "group=%s topics=%d first=%s", c->group,
				 nmissing, missing);
			if (rd_kafka_subscribe(c->rk, sub) !=
			    RD_KAFKA_RESP_ERR_NO_ERROR)
				log_warn("kafka consumer: subscribing again "
					 "failed",
					 "group=%s", c->group);
		}
	}
	if (md != NULL)
		rd_kafka_metadata_destroy(md);
	if (mine != NULL)
		rd_kafka_topic_partition_list_destroy(mine);
	for (int i = 0; i < ncomp; i++)
		if (sub->elems[i].topic[0] == '^')
			regfree(&re[i]);
	xfree(re);
	rd_kafka_topic_partition_list_destroy(sub);
}

/* Served by rd_kafka_consumer_poll, hence on the loop. */
static void
rebalance_cb(rd_kafka_t *rk, rd_kafka_resp_err_t err,
	     rd_kafka_topic_partition_list_t *l, void *opaque)
{
	struct kafka_consumer *c = opaque;
	int assigned = err == RD_KAFKA_RESP_ERR__ASSIGN_PARTITIONS;

	if (!assigned && c->rebalance_cb != NULL)
		c->rebalance_cb(l, 0, c->arg);
	/* What was done with the partitions going away (the callback may
	 * just have added to it) is committed before they go: the request
	 * reaches the coordinator ahead of the next JoinGroup. */
	if (!assigned)
		commit_flush(c);
	rebalance_apply(rk, err, l);
	if (assigned) {
		if (c->paused)
			pause_parts(c, l, 1);
		if (c->rebalance_cb != NULL)
			c->rebalance_cb(l, 1, c->arg);
		if (c->is_static && !c->sub_checked) {
			struct timeval tv = {1, 0};

			c->sub_checked = 1;
			evtimer_add(c->sub_ev, &tv);
		}
	}
}

void
kafka_instance_id(char *buf, size_t len, const char *role, const char *listen)
{
	char host[128];

	if (gethostname(host, sizeof(host)) != 0)
		snprintf(host, sizeof(host), "host");
	host[sizeof(host) - 1] = '\0';
	snprintf(buf, len, "%.40s.%.100s.%.100s", role, host, listen);
	for (char *p = buf; *p; p++)
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '-' &&
		    *p != '_')
			*p = '_';
}

struct kafka_consumer *
kafka_consumer_create(struct event_base *base, const struct cfg *cfg,
		      const char *group, const char *topic, kafka_msg_fn msg_cb,
		      void *arg, char *err, size_t errlen)
{
	return kafka_consumer_create_opts(base, cfg, group, topic, msg_cb, arg,
					  NULL, err, errlen);
}

static void consumer_remake_cb(evutil_socket_t fd, short what, void *arg);

/*
 * Makes c's handle from what c holds, subscribes it and wires its queue
 * to the loop's event (made once: the pipe outlives handles). probe: ask
 * the brokers first (at start; not when made again, the brokers may be
 * the reason).
 */
static int
consumer_open(struct kafka_consumer *c, struct event_base *base, int probe,
	      char *err, size_t errlen)
{
	const struct cfg *cfg = c->cfg;
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	rd_kafka_topic_partition_list_t *topics;
	int64_t session = cfg_int(cfg, CFG_KAFKA_SESSION_TIMEOUT_MS);
	char session_s[32], beat_s[32], instance[256];

	snprintf(session_s, sizeof(session_s), "%lld", (long long)session);
	/* A tenth of the session, at most 1 s: a rebalance (a static leader
	 * that rejoined starts one) reaches the other members on their next
	 * heartbeat, and until all have rejoined nobody fetches. */
	snprintf(beat_s, sizeof(beat_s), "%lld",
		 (long long)(session / 10 < 1000 ? session / 10 : 1000));
	if (set_common(conf, cfg, err, errlen) < 0 ||
	    set(conf, "group.id", c->group, err, errlen) ||
	    set(conf, "enable.auto.commit", "false", err, errlen) ||
	    set(conf, "enable.auto.offset.store", "false", err, errlen) ||
	    set(conf, "auto.offset.reset", "earliest", err, errlen) ||
	    set(conf, "session.timeout.ms", session_s, err, errlen) ||
	    set(conf, "heartbeat.interval.ms", beat_s, err, errlen))
		goto fail;
	/* A static member (KIP-345): restarted with the same instance id it
	 * gets its partitions back without a rebalance, where a member that
	 * did not manage to leave held them until its session timeout. */
	if (c->role != NULL && cfg_int(cfg, CFG_KAFKA_STATIC_MEMBERSHIP)) {
		kafka_instance_id(instance, sizeof(instance), c->role,
				  c->listen ? c->listen : "");
		if (set(conf, "group.instance.id", instance, err, errlen))
			goto fail;
		c->is_static = 1;
	}
	c->sub_checked = 0; /* a handle made again is checked again */
	if (set_section(conf, cfg, "kafka.consumer", err, errlen) < 0)
		goto fail;
	for (char **p = c->props; p && p[0]; p += 2)
		if (set(conf, p[0], p[1], err, errlen))
			goto fail;
	rd_kafka_conf_set_opaque(conf, c);
	rd_kafka_conf_set_error_cb(conf, consumer_error_cb);
	rd_kafka_conf_set_log_cb(conf, log_cb);
	/* Always ours (rebalance_apply assigns): gathered offsets go before
	 * a revocation, and a static member's first assignment is checked
	 * (sub_check_cb), whether the caller listens or not. */
	rd_kafka_conf_set_rebalance_cb(conf, rebalance_cb);
	c->rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, errlen);
	if (c->rk == NULL)
		return -1;
	/* Before the main queue is forwarded to the consumer's: the probe
	 * serves it with rd_kafka_poll. */
	if (probe && probe_run(c->rk, &c->probe, cfg, err, errlen) < 0) {
		rd_kafka_destroy(c->rk);
		c->rk = NULL;
		return -1;
	}
	rd_kafka_poll_set_consumer(c->rk);
	topics = subscription_list(c->topic);
	if (rd_kafka_subscribe(c->rk, topics) != RD_KAFKA_RESP_ERR_NO_ERROR) {
		snprintf(err, errlen, "cannot subscribe to %s", c->topic);
		rd_kafka_topic_partition_list_destroy(topics);
		rd_kafka_destroy(c->rk);
		c->rk = NULL;
		return -1;
	}
	rd_kafka_topic_partition_list_destroy(topics);
	if (c->ev == NULL) {
		if (pipe2(c->pipefd, O_NONBLOCK | O_CLOEXEC) < 0)
			log_fatal("pipe failed", "");
		c->ev = event_new(base, c->pipefd[0], EV_READ | EV_PERSIST,
				  consumer_wake_cb, c);
		event_add(c->ev, NULL);
		c->remake_ev = evtimer_new(base, consumer_remake_cb, c);
		c->commit_ev = evtimer_new(base, commit_timer_cb, c);
		c->sub_ev = evtimer_new(base, sub_check_cb, c);
	}
	c->q = rd_kafka_queue_get_consumer(c->rk);
	rd_kafka_queue_io_event_enable(c->q, c->pipefd[1], "1", 1);
	/* What the subscription queued before the wake-ups were enabled
	 * (a join on fresh metadata is that quick) would never write the
	 * pipe: the queue wakes only when it turns non-empty. */
	event_active(c->ev, EV_READ, 0);
	return 0;
fail:
	rd_kafka_conf_destroy(conf);
	return -1;
}

static void
consumer_params_free(struct kafka_consumer *c)
{
	xfree(c->group);
	xfree(c->topic);
	xfree(c->role);
	xfree(c->listen);
	for (char **p = c->props; p && *p; p++)
		xfree(*p);
	xfree(c->props);
}

struct kafka_consumer *
kafka_consumer_create_opts(struct event_base *base, const struct cfg *cfg,
			   const char *group, const char *topic,
			   kafka_msg_fn msg_cb, void *arg,
			   const struct kafka_consumer_opts *opts, char *err,
			   size_t errlen)
{
	struct kafka_consumer *c = xcalloc(1, sizeof(*c));
	size_t n = 0;

	c->cfg = cfg;
	c->group = xstrdup(group);
	c->topic = xstrdup(topic);
	if (opts != NULL && opts->role != NULL) {
		c->role = xstrdup(opts->role);
		c->listen = xstrdup(opts->listen ? opts->listen : "");
	}
	for (const char *const *p = opts ? opts->props : NULL; p && p[0];
	     p += 2)
		n += 2;
	c->props = xcalloc(n + 1, sizeof(*c->props));
	for (size_t i = 0; i < n; i++)
		c->props[i] = xstrdup(opts->props[i]);
	if (opts != NULL)
		c->rebalance_cb = opts->rebalance_cb;
	c->msg_cb = msg_cb;
	c->arg = arg;
	if (consumer_open(c, base, 1, err, errlen) < 0) {
		consumer_params_free(c);
		xfree(c);
		return NULL;
	}
	return c;
}

static void destroy_handle_async(rd_kafka_t *rk);

/*
 * A fatal error (librdkafka 2.0.2 makes FENCED_INSTANCE_ID one: a static
 * member whose session ran out while the group coordinator was away, and
 * whose commit then carried its old member id) leaves the handle unusable
 * for good. The consumer is made again in place: its partitions are
 * revoked from the owner first (what it holds of them was not committed,
 * so the new member reads it again: at-least-once), the old handle is
 * destroyed on a thread (without a group leave: it is fenced anyway).
 */
static void
consumer_remake(struct kafka_consumer *c)
{
	rd_kafka_topic_partition_list_t *mine = NULL;
	char why[512], err[256];

	c->fatal = 0;
	if (rd_kafka_fatal_error(c->rk, why, sizeof(why)) ==
	    RD_KAFKA_RESP_ERR_NO_ERROR)
		snprintf(why, sizeof(why), "fatal error");
	log_error("kafka consumer failed for good: making it again",
		  "group=%s error=\"%s\"", c->group, why);
	if (c->rebalance_cb != NULL &&
	    rd_kafka_assignment(c->rk, &mine) == RD_KAFKA_RESP_ERR_NO_ERROR) {
		if (mine->cnt > 0)
			c->rebalance_cb(mine, 0, c->arg);
		rd_kafka_topic_partition_list_destroy(mine);
	}
	/* Commits of the fenced member would be refused: its successor
	 * reads from the last committed offsets (at-least-once). */
	commit_drop(c);
	evtimer_del(c->sub_ev); /* the new handle's first assignment is */
	rd_kafka_queue_io_event_enable(c->q, -1, NULL, 0);
	rd_kafka_queue_destroy(c->q);
	c->q = NULL;
	destroy_handle_async(c->rk);
	c->rk = NULL;
	if (consumer_open(c, NULL, 0, err, sizeof(err)) < 0) {
		struct timeval tv = {1, 0};

		log_error("kafka consumer not made again: retrying in 1 s",
			  "group=%s error=\"%s\"", c->group, err);
		evtimer_add(c->remake_ev, &tv);
		return;
	}
	if (c->paused) {
		c->paused = 0;
		kafka_consumer_pause(c, 1);
	}
	log_info("kafka consumer made again", "group=%s", c->group);
}

static void
consumer_remake_cb(evutil_socket_t fd, short what, void *arg)
{
	struct kafka_consumer *c = arg;
	char err[256];
	struct timeval tv = {1, 0};

	(void)fd;
	(void)what;
	if (consumer_open(c, NULL, 0, err, sizeof(err)) < 0) {
		evtimer_add(c->remake_ev, &tv);
		return;
	}
	log_info("kafka consumer made again", "group=%s", c->group);
}

int
kafka_consumer_poll(struct kafka_consumer *c, int max)
{
	int n = 0;

	if (c->rk == NULL) /* being made again */
		return 0;
	if (c->fatal || rd_kafka_fatal_error(c->rk, NULL, 0) !=
				RD_KAFKA_RESP_ERR_NO_ERROR) {
		consumer_remake(c);
		return 0;
	}
	while (n < max && !c->held) {
		rd_kafka_message_t *m = rd_kafka_consumer_poll(c->rk, 0);

		if (m == NULL)
			break;
		if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR)
			c->msg_cb(m, c->arg);
		else if (m->err == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
			/* A topic nothing was published to yet. */
			log_info("kafka topic not there (yet)", "error=\"%s\"",
				 rd_kafka_message_errstr(m));
		else if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF)
			log_warn("kafka consume error", "error=\"%s\"",
				 rd_kafka_message_errstr(m));
		rd_kafka_message_destroy(m);
		n++;
		if (c->fatal) {
			consumer_remake(c);
			return n;
		}
	}
	/* The queue wakes the loop only when it turns non-empty: if it may
	 * still hold messages, come back on the next loop iteration. */
	if (n == max && !c->held)
		event_active(c->ev, EV_READ, 0);
	return n;
}

void
kafka_consumer_commit(struct kafka_consumer *c, const char *topic,
		      int32_t partition, int64_t next_offset)
{
	rd_kafka_topic_partition_list_t *l;
	rd_kafka_topic_partition_t *e;
	struct timeval tv = {0, KAFKA_COMMIT_MS * 1000};

	if (c->rk == NULL) /* being made again: its next member reads on */
		return;
	if (c->to_commit == NULL)
		c->to_commit = rd_kafka_topic_partition_list_new(8);
	l = c->to_commit;
	e = rd_kafka_topic_partition_list_find(l, topic, partition);
	if (e == NULL)
		e = rd_kafka_topic_partition_list_add(l, topic, partition);
	e->offset = next_offset; /* the latest call's, as when each was sent */
	if (!evtimer_pending(c->commit_ev, NULL))
		evtimer_add(c->commit_ev, &tv);
}

/*
 * Leaves the group and frees the handle, waiting KAFKA_CLOSE_MS at most:
 * rd_kafka_consumer_close() and then rd_kafka_destroy() were seen to hang
 * for good at shutdown (librdkafka 2.0.2, the notifier under
 * scripts/bench; not understood yet). A handle that did not close is left
 * to the process exit; the group notices the member gone after its session
 * timeout.
 */
static void
consumer_close(rd_kafka_t *rk)
{
	rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
	rd_kafka_error_t *e = rd_kafka_consumer_close_queue(rk, q);
	int64_t until = clock_mono_ms() + KAFKA_CLOSE_MS;
	int closed = 0;

	if (e != NULL) {
		log_warn("kafka consumer close failed", "error=\"%s\"",
			 rd_kafka_error_string(e));
		rd_kafka_error_destroy(e);
		closed = 1; /* rd_kafka_destroy() closes it, blocking */
	} else {
		while (!(closed = rd_kafka_consumer_closed(rk)) &&
		       clock_mono_ms() < until) {
			rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 100);

			/* With a rebalance callback, the last revocation
			 * comes here and is ours to apply. */
			if (ev != NULL &&
			    rd_kafka_event_type(ev) == RD_KAFKA_EVENT_REBALANCE)
				rebalance_apply(
					rk, rd_kafka_event_error(ev),
					rd_kafka_event_topic_partition_list(
						ev));
			if (ev != NULL)
				rd_kafka_event_destroy(ev);
		}
		if (!closed)
			log_warn("kafka consumer did not leave its group in "
				 "time; left to the process exit (its "
				 "partitions "
				 "move after the session timeout)",
				 "waited_ms=%d", KAFKA_CLOSE_MS);
	}
	rd_kafka_queue_destroy(q);
	if (closed)
		rd_kafka_destroy(rk);
}

/* Off the loop from here: the caller is done with it. */
static void
consumer_detach(struct kafka_consumer *c)
{
	/* Sent before the close (which leaves the group after it). */
	commit_flush(c);
	c->rebalance_cb = NULL;
	if (c->q != NULL) {
		rd_kafka_queue_io_event_enable(c->q, -1, NULL, 0);
		rd_kafka_queue_destroy(c->q);
		c->q = NULL;
	}
	event_free(c->ev);
	event_free(c->remake_ev);
	event_free(c->commit_ev);
	event_free(c->sub_ev);
}

static void
consumer_free(struct kafka_consumer *c)
{
	if (c->rk != NULL)
		consumer_close(c->rk);
	close(c->pipefd[0]);
	close(c->pipefd[1]);
	consumer_params_free(c);
	xfree(c);
}

void
kafka_consumer_destroy(struct kafka_consumer *c)
{
	if (c == NULL)
		return;
	consumer_detach(c);
	consumer_free(c);
}

/* Consumers being closed by threads of their own. */
static pthread_mutex_t closing_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t closing_cv = PTHREAD_COND_INITIALIZER;
static int closing;

static void *
close_main(void *arg)
{
	consumer_free(arg);
	pthread_mutex_lock(&closing_mu);
	if (--closing == 0)
		pthread_cond_broadcast(&closing_cv);
	pthread_mutex_unlock(&closing_mu);
	return NULL;
}

void
kafka_consumer_destroy_async(struct kafka_consumer *c)
{
	pthread_t t;

	if (c == NULL)
		return;
	consumer_detach(c);
	pthread_mutex_lock(&closing_mu);
	closing++;
	pthread_mutex_unlock(&closing_mu);
	if (pthread_create(&t, NULL, close_main, c) != 0) {
		close_main(c); /* no thread: here, then */
		return;
	}
	pthread_detach(t);
}

static void *
destroy_main(void *arg)
{
	rd_kafka_destroy_flags(arg, RD_KAFKA_DESTROY_F_NO_CONSUMER_CLOSE);
	pthread_mutex_lock(&closing_mu);
	if (--closing == 0)
		pthread_cond_broadcast(&closing_cv);
	pthread_mutex_unlock(&closing_mu);
	return NULL;
}

/* A handle that failed for good, destroyed off the loop (it may take a
 * while to stop its threads); kafka_consumer_wait_closed() waits for it. */
static void
destroy_handle_async(rd_kafka_t *rk)
{
	pthread_t t;

	pthread_mutex_lock(&closing_mu);
	closing++;
	pthread_mutex_unlock(&closing_mu);
	if (pthread_create(&t, NULL, destroy_main, rk) != 0) {
		destroy_main(rk);
		return;
	}
	pthread_detach(t);
}

void
kafka_consumer_wait_closed(void)
{
	pthread_mutex_lock(&closing_mu);
	while (closing > 0)
		pthread_cond_wait(&closing_cv, &closing_mu);
	pthread_mutex_unlock(&closing_mu);
}

/* Topics -------------------------------------------------------------- */

/* The kafka.topic_* settings of a topic Prophet creates. */
struct topic_spec {
	int parts, repl, isr;
};

static struct topic_spec
topic_spec(const struct cfg *cfg)
{
	return (struct topic_spec){
		.parts = (int)cfg_int(cfg, CFG_KAFKA_TOPIC_PARTITIONS),
		.repl = (int)cfg_int(cfg, CFG_KAFKA_TOPIC_REPLICATION),
		.isr = (int)cfg_int(cfg, CFG_KAFKA_TOPIC_MIN_INSYNC),
	};
}

/* A topic setting for the log: 0 is the brokers' default, not zero. */
static const char *
or_default(char *buf, size_t len, int v)
{
	if (v <= 0)
		return "default";
	snprintf(buf, len, "%d", v);
	return buf;
}

/* CreateTopics through rk's connections; a topic that exists is no
 * error. */
static int
create_topics(rd_kafka_t *rk, struct topic_spec sp, const char *const *topics,
	      size_t n, int timeout_ms, char *err, size_t errlen)
{
	int parts = sp.parts, repl = sp.repl, isr = sp.isr;
	rd_kafka_NewTopic_t **nt;
	rd_kafka_AdminOptions_t *o;
	rd_kafka_queue_t *q;
	rd_kafka_event_t *ev;
	const rd_kafka_CreateTopics_result_t *res;
	const rd_kafka_topic_result_t **tr;
	size_t ntr = 0;
	char num[16], es[256], dp[16], dr[16], di[16];
	int rc = 0;

	err[0] = '\0';
	snprintf(num, sizeof(num), "%d", isr);
	nt = xcalloc(n, sizeof(*nt));
	for (size_t i = 0; i < n; i++) {
		/* -1: the brokers' defaults (KIP-464). */
		nt[i] = rd_kafka_NewTopic_new(topics[i], parts > 0 ? parts : -1,
					      repl > 0 ? repl : -1, es,
					      sizeof(es));
		if (nt[i] == NULL) {
			snprintf(err, errlen, "%s: %s", topics[i], es);
			rc = -1;
			goto out;
		}
		if (isr > 0 &&
		    rd_kafka_NewTopic_set_config(nt[i], "min.insync.replicas",
						 num) != 0) {
			snprintf(err, errlen, "%s: min.insync.replicas",
				 topics[i]);
			rc = -1;
			goto out;
		}
	}
	o = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
	rd_kafka_AdminOptions_set_request_timeout(o, timeout_ms, es,
						  sizeof(es));
	rd_kafka_AdminOptions_set_operation_timeout(o, timeout_ms, es,
						    sizeof(es));
	q = rd_kafka_queue_new(rk);
	rd_kafka_CreateTopics(rk, nt, n, o, q);
	ev = rd_kafka_queue_poll(q, timeout_ms + 2000);
	res = ev ? rd_kafka_event_CreateTopics_result(ev) : NULL;
	if (ev == NULL) {
		snprintf(err, errlen, "no answer from the brokers in %d ms",
			 timeout_ms + 2000);
		rc = -1;
	} else if (rd_kafka_event_error(ev) != RD_KAFKA_RESP_ERR_NO_ERROR) {
		snprintf(err, errlen, "%s", rd_kafka_event_error_string(ev));
		rc = -1;
	} else if (res != NULL) {
		tr = rd_kafka_CreateTopics_result_topics(res, &ntr);
		for (size_t i = 0; i < ntr; i++) {
			rd_kafka_resp_err_t e =
				rd_kafka_topic_result_error(tr[i]);
			const char *name = rd_kafka_topic_result_name(tr[i]);

			if (e == RD_KAFKA_RESP_ERR_NO_ERROR) {
				log_info("kafka topic created",
					 "topic=%s partitions=%s "
					 "replication=%s min_insync=%s",
					 name,
					 or_default(dp, sizeof(dp), parts),
					 or_default(dr, sizeof(dr), repl),
					 or_default(di, sizeof(di), isr));
			} else if (e !=
				   RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS) {
				snprintf(err, errlen, "%s: %s", name,
					 rd_kafka_topic_result_error_string(
						 tr[i])
						 ?: rd_kafka_err2str(e));
				rc = -1;
			}
		}
	}
	if (ev != NULL)
		rd_kafka_event_destroy(ev);
	rd_kafka_queue_destroy(q);
	rd_kafka_AdminOptions_destroy(o);
out:
	for (size_t i = 0; i < n; i++)
		if (nt[i] != NULL)
			rd_kafka_NewTopic_destroy(nt[i]);
	xfree(nt);
	return rc;
}

int
kafka_ensure_topics(struct kafka_producer *p, const struct cfg *cfg,
		    const char *const *topics, size_t n, int timeout_ms,
		    char *err, size_t errlen)
{
	err[0] = '\0';
	if (!cfg_int(cfg, CFG_KAFKA_CREATE_TOPICS) || n == 0)
		return 0;
	if (p->rk == NULL) {
		snprintf(err, errlen, "the producer is being made again");
		return -1;
	}
	return create_topics(p->rk, topic_spec(cfg), topics, n, timeout_ms, err,
			     errlen);
}

int
kafka_topic_ensure_parts(struct kafka_producer *p, const struct cfg *cfg,
			 const char *topic, int parts, int timeout_ms,
			 char *err, size_t errlen)
{
	struct topic_spec sp = topic_spec(cfg);
	const rd_kafka_metadata_t *md = NULL;
	rd_kafka_topic_t *rkt;
	rd_kafka_resp_err_t e;
	int n = -1;

	err[0] = '\0';
	if (p->rk == NULL) {
		snprintf(err, errlen, "the producer is being made again");
		return -1;
	}
	sp.parts = parts;
	if (create_topics(p->rk, sp, &topic, 1, timeout_ms, err, errlen) < 0)
		return -1;
	rkt = rd_kafka_topic_new(p->rk, topic, NULL);
	e = rd_kafka_metadata(p->rk, 0, rkt, &md, timeout_ms);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR)
		snprintf(err, errlen, "metadata of %s: %s", topic,
			 rd_kafka_err2str(e));
	else if (md->topic_cnt != 1 ||
		 md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR)
		snprintf(err, errlen, "metadata of %s: %s", topic,
			 md->topic_cnt != 1
				 ? "no topic"
				 : rd_kafka_err2str(md->topics[0].err));
	else
		n = md->topics[0].partition_cnt;
	if (md != NULL)
		rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	return n;
}

/* Blocking admin client ----------------------------------------------- */

struct kafka_admin {
	rd_kafka_t *rk;
	struct topic_spec spec; /* read at create: cfg is the loop's */
};

/*
 * No [kafka.producer] or [kafka.consumer] here, and never auto-creation:
 * a metadata request naming a topic would otherwise make it on brokers
 * with auto.create.topics.enable=true, and the check would always pass.
 */
struct kafka_admin *
kafka_admin_create(const struct cfg *cfg, char *err, size_t errlen)
{
	struct kafka_admin *a = xcalloc(1, sizeof(*a));
	rd_kafka_conf_t *conf = rd_kafka_conf_new();

	a->spec = topic_spec(cfg);
	if (set_common(conf, cfg, err, errlen) < 0 ||
	    set(conf, "allow.auto.create.topics", "false", err, errlen) ||
	    set(conf, "reconnect.backoff.max.ms", "1000", err, errlen)) {
		rd_kafka_conf_destroy(conf);
		xfree(a);
		return NULL;
	}
	rd_kafka_conf_set_log_cb(conf, log_cb);
	a->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, errlen);
	if (a->rk == NULL) {
		xfree(a);
		return NULL;
	}
	return a;
}

void
kafka_admin_destroy(struct kafka_admin *a)
{
	if (a == NULL)
		return;
	rd_kafka_destroy(a->rk);
	xfree(a);
}

int
kafka_admin_topic_exists(struct kafka_admin *a, const char *topic,
			 int timeout_ms, char *err, size_t errlen)
{
	const struct rd_kafka_metadata *md = NULL;
	rd_kafka_topic_t *rkt = rd_kafka_topic_new(a->rk, topic, NULL);
	rd_kafka_resp_err_t e;
	int rc = -1;

	err[0] = '\0';
	if (rkt == NULL) {
		snprintf(err, errlen, "%s",
			 rd_kafka_err2str(rd_kafka_last_error()));
		return -1;
	}
	e = rd_kafka_metadata(a->rk, 0, rkt, &md, timeout_ms);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
		snprintf(err, errlen, "%s", rd_kafka_err2str(e));
	} else if (md->topic_cnt < 1) {
		snprintf(err, errlen, "no topic in the metadata answer");
		rc = -2;
	} else {
		e = md->topics[0].err;
		if (e == RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART)
			rc = 0;
		else if (e == RD_KAFKA_RESP_ERR_NO_ERROR ||
			 e == RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE)
			rc = 1; /* a new topic's leader may be elected yet */
		else
			rc = -2;
		if (rc == -2)
			snprintf(err, errlen, "%s", rd_kafka_err2str(e));
	}
	if (md != NULL)
		rd_kafka_metadata_destroy(md);
	rd_kafka_topic_destroy(rkt);
	return rc;
}

int
kafka_admin_create_topic(struct kafka_admin *a, const char *topic,
			 int timeout_ms, char *err, size_t errlen)
{
	return create_topics(a->rk, a->spec, &topic, 1, timeout_ms, err,
			     errlen);
}

/* Transactional producer ----------------------------------------------- */

struct kafka_txn {
	rd_kafka_t *rk;
	char err[256]; /* the last delivery error of a send */
};

static void
txn_dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
	struct kafka_txn *t = opaque;
	struct kafka_rec *r = m->_private;

	if (m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		snprintf(t->err, sizeof(t->err), "%s",
			 rd_kafka_err2str(m->err));
		return;
	}
	r->partition = m->partition;
	r->offset = m->offset;
}

static int
txn_error(rd_kafka_error_t *e, const char *what, char *err, size_t errlen)
{
	if (e == NULL)
		return 0;
	snprintf(err, errlen, "%s: %s", what, rd_kafka_error_string(e));
	rd_kafka_error_destroy(e);
	return -1;
}

struct kafka_txn *
kafka_txn_create(const struct cfg *cfg, const char *txn_id, int timeout_ms,
		 char *err, size_t errlen)
{
	struct kafka_txn *t = xcalloc(1, sizeof(*t));
	rd_kafka_conf_t *conf = rd_kafka_conf_new();

	if (set_common(conf, cfg, err, errlen) < 0 ||
	    set(conf, "transactional.id", txn_id, err, errlen) ||
	    set(conf, "linger.ms", "5", err, errlen) ||
	    set(conf, "socket.keepalive.enable", "true", err, errlen) ||
	    set(conf, "reconnect.backoff.max.ms", "1000", err, errlen) ||
	    set_section(conf, cfg, "kafka.producer", err, errlen) < 0) {
		rd_kafka_conf_destroy(conf);
		xfree(t);
		return NULL;
	}
	rd_kafka_conf_set_opaque(conf, t);
	rd_kafka_conf_set_dr_msg_cb(conf, txn_dr_cb);
	rd_kafka_conf_set_log_cb(conf, log_cb);
	t->rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, errlen);
	if (t->rk == NULL) {
		xfree(t);
		return NULL;
	}
	if (txn_error(rd_kafka_init_transactions(t->rk, timeout_ms),
		      "init transactions", err, errlen) < 0) {
		kafka_txn_destroy(t);
		return NULL;
	}
	return t;
}

void
kafka_txn_destroy(struct kafka_txn *t)
{
	if (t == NULL)
		return;
	rd_kafka_purge(t->rk,
		       RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
	rd_kafka_poll(t->rk, 0);
	rd_kafka_destroy(t->rk);
	xfree(t);
}

int
kafka_txn_send(struct kafka_txn *t, const char *topic, struct kafka_rec *recs,
	       size_t n, int timeout_ms, int *fatal, char *err, size_t errlen)
{
	rd_kafka_error_t *e;

	*fatal = 0;
	t->err[0] = '\0';
	if (txn_error(rd_kafka_begin_transaction(t->rk), "begin", err, errlen) <
	    0) {
		*fatal = 1;
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		struct kafka_rec *r = &recs[i];
		rd_kafka_headers_t *h = r->hdrs;
		rd_kafka_resp_err_t pe;

		r->partition = -1;
		r->offset = -1;
		r->hdrs = NULL; /* taken over by librdkafka, or freed below */
		pe = rd_kafka_producev(
			t->rk, RD_KAFKA_V_TOPIC(r->topic ? r->topic : topic),
			RD_KAFKA_V_PARTITION(r->pinned ? r->pin_partition
						       : RD_KAFKA_PARTITION_UA),
			RD_KAFKA_V_KEY(r->key, r->keylen),
			RD_KAFKA_V_VALUE((void *)r->value, r->valuelen),
			RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY),
			RD_KAFKA_V_HEADERS(h), RD_KAFKA_V_OPAQUE(r),
			RD_KAFKA_V_END);
		if (pe != RD_KAFKA_RESP_ERR_NO_ERROR) {
			rd_kafka_headers_destroy(h);
			for (size_t k = i + 1; k < n; k++) {
				rd_kafka_headers_destroy(recs[k].hdrs);
				recs[k].hdrs = NULL;
			}
			snprintf(err, errlen, "produce: %s",
				 rd_kafka_err2str(pe));
			goto abort;
		}
	}
	/* Commit flushes: every record's delivery report has come back
	 * (on this thread) when it returns. */
	e = rd_kafka_commit_transaction(t->rk, timeout_ms);
	if (e == NULL) {
		for (size_t i = 0; i < n; i++)
			if (recs[i].offset < 0) {
				snprintf(err, errlen,
					 "committed without an offset: %s",
					 t->err);
				*fatal = 1;
				return -1;
			}
		return 0;
	}
	snprintf(err, errlen, "commit: %s%s%s", rd_kafka_error_string(e),
		 t->err[0] ? "; delivery: " : "", t->err);
	if (!rd_kafka_error_txn_requires_abort(e)) {
		/* Fatal, or timed out with the outcome unknown. */
		rd_kafka_error_destroy(e);
		*fatal = 1;
		return -1;
	}
	rd_kafka_error_destroy(e);
abort:
	e = rd_kafka_abort_transaction(t->rk, timeout_ms);
	if (e != NULL) {
		*fatal = 1;
		rd_kafka_error_destroy(e);
	}
	return -1;
}

/* Reading committed records back -------------------------------------- */

int
kafka_read_committed(const struct cfg *cfg, const char *topic,
		     const int64_t *from, int nfrom, kafka_msg_fn cb, void *arg,
		     int64_t **ends, int *nends, int timeout_ms, char *err,
		     size_t errlen)
{
	rd_kafka_conf_t *conf = rd_kafka_conf_new();
	const rd_kafka_metadata_t *md = NULL;
	rd_kafka_topic_partition_list_t *tp = NULL;
	rd_kafka_topic_t *rkt = NULL;
	rd_kafka_t *rk;
	int64_t deadline = clock_mono_ms() + timeout_ms, *hi = NULL;
	int np = 0, left = 0, rc = -1;
	char *done = NULL;
	rd_kafka_resp_err_t e;

	*ends = NULL;
	*nends = 0;
	if (set_common(conf, cfg, err, errlen) < 0 ||
	    set(conf, "group.id", "prophet-archive-readback", err, errlen) ||
	    set(conf, "isolation.level", "read_committed", err, errlen) ||
	    set(conf, "enable.auto.commit", "false", err, errlen) ||
	    set(conf, "enable.partition.eof", "true", err, errlen) ||
	    set_section(conf, cfg, "kafka.consumer", err, errlen) < 0) {
		rd_kafka_conf_destroy(conf);
		return -1;
	}
	rd_kafka_conf_set_log_cb(conf, log_cb);
	rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, errlen);
	if (rk == NULL)
		return -1;
	rkt = rd_kafka_topic_new(rk, topic, NULL);
	e = rd_kafka_metadata(rk, 0, rkt, &md, timeout_ms);
	if (e != RD_KAFKA_RESP_ERR_NO_ERROR || md->topic_cnt != 1 ||
	    md->topics[0].err != RD_KAFKA_RESP_ERR_NO_ERROR) {
		snprintf(err, errlen, "metadata of %s: %s", topic,
			 e != RD_KAFKA_RESP_ERR_NO_ERROR ? rd_kafka_err2str(e)
			 : md->topic_cnt != 1
				 ? "no topic"
				 : rd_kafka_err2str(md->topics[0].err));
		goto out;
	}
	np = md->topics[0].partition_cnt;
	hi = xcalloc((size_t)np + 1, sizeof(*hi));
	done = xcalloc((size_t)np + 1, 1);
	tp = rd_kafka_topic_partition_list_new(np);
	for (int i = 0; i < np; i++) {
		int32_t part = md->topics[0].partitions[i].id;
		int64_t lo = 0, h = 0, start;

		if (part < 0 || part >= np) {
			snprintf(err, errlen, "partition %d of %d", part, np);
			goto out;
		}
		e = rd_kafka_query_watermark_offsets(rk, topic, part, &lo, &h,
						     timeout_ms);
		if (e != RD_KAFKA_RESP_ERR_NO_ERROR) {
			snprintf(err, errlen, "watermarks of %s [%d]: %s",
				 topic, part, rd_kafka_err2str(e));
			goto out;
		}
		hi[part] = h;
		/* A partition added since from was taken: all of it. */
		start = from == NULL	 ? h
			: part >= nfrom	 ? lo
			: from[part] < 0 ? h
					 : from[part];
		if (start < lo)
			start = lo;
		if (start < h) {
			rd_kafka_topic_partition_list_add(tp, topic, part)
				->offset = start;
			left++;
		} else {
			done[part] = 1;
		}
	}
	if (left > 0 && (e = rd_kafka_assign(rk, tp)) != 0) {
		snprintf(err, errlen, "assign: %s", rd_kafka_err2str(e));
		goto out;
	}
	while (left > 0) {
		rd_kafka_message_t *m;

		if (clock_mono_ms() > deadline) {
			snprintf(err, errlen, "read back of %s timed out",
				 topic);
			goto out;
		}
		m = rd_kafka_consumer_poll(rk, 50);
		if (m == NULL)
			continue;
		if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF &&
		    m->err != RD_KAFKA_RESP_ERR_NO_ERROR) {
			snprintf(err, errlen, "read back of %s: %s", topic,
				 rd_kafka_message_errstr(m));
			rd_kafka_message_destroy(m);
			goto out;
		}
		if (m->partition < 0 || m->partition >= np ||
		    done[m->partition]) {
			rd_kafka_message_destroy(m);
			continue;
		}
		/* read_committed ends at the first transaction still open
		 * (the last stable offset): the end is the high watermark
		 * taken above, reached once what was open then has ended.
		 * Records past it are not read. */
		if (m->offset >= hi[m->partition]) {
			done[m->partition] = 1;
			left--;
		} else if (m->err == RD_KAFKA_RESP_ERR_NO_ERROR) {
			cb(m, arg);
		}
		rd_kafka_message_destroy(m);
	}
	*ends = hi;
	*nends = np;
	hi = NULL;
	rc = 0;
out:
	xfree(hi);
	xfree(done);
	if (tp != NULL)
		rd_kafka_topic_partition_list_destroy(tp);
	if (md != NULL)
		rd_kafka_metadata_destroy(md);
	if (rkt != NULL)
		rd_kafka_topic_destroy(rkt);
	rd_kafka_consumer_close(rk);
	rd_kafka_destroy(rk);
	return rc;
}
