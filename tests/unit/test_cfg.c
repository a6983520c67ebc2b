#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cfg.h"
#include "kafka.h"
#include "secret.h"
#include "url.h"
#include "xmalloc.h"
#include "zk.h"

struct tmpconf {
	char path[64];
};

static void
tmpconf_write(struct tmpconf *tc, const char *text)
{
	int fd;

	snprintf(tc->path, sizeof(tc->path), "/tmp/prophet-test-cfg-XXXXXX");
	fd = mkstemp(tc->path);
	assert_true(fd >= 0);
	assert_int_equal(write(fd, text, strlen(text)), (ssize_t)strlen(text));
	assert_int_equal(close(fd), 0);
}

static void
tmpconf_remove(struct tmpconf *tc)
{
	unlink(tc->path);
}

static void
assert_contains(const char *haystack, const char *needle)
{
	if (strstr(haystack, needle) == NULL)
		fail_msg("'%s' does not contain '%s'", haystack, needle);
}

/* cfg_set must accept value for section.key. */
static void
set_ok(const char *section, const char *key, const char *value)
{
	struct cfg *cfg = cfg_create();
	char err[256] = "";
	int rc = cfg_set(cfg, section, key, value, err, sizeof(err));

	cfg_destroy(cfg);
	if (rc != 0)
		fail_msg("%s.%s = '%s' rejected: %s", section, key, value, err);
}

/* Whether every key of a holds the same value as in b. */
static int
cfg_same(const struct cfg *a, const struct cfg *b)
{
	for (int i = 0; i < CFG__COUNT; i++)
		if (strcmp(cfg_str(a, (enum cfg_id)i),
			   cfg_str(b, (enum cfg_id)i)) ||
		    cfg_int(a, (enum cfg_id)i) != cfg_int(b, (enum cfg_id)i))
			return 0;
	return 1;
}

/* cfg_set must reject value, name the key, and keep the old value. */
static void
set_bad(const char *section, const char *key, const char *value)
{
	struct cfg *cfg = cfg_create(), *ref = cfg_create();
	char err[256] = "", name[128];
	int rc = cfg_set(cfg, section, key, value, err, sizeof(err));
	int same = cfg_same(cfg, ref);

	cfg_destroy(ref);
	cfg_destroy(cfg);
	if (rc != -1)
		fail_msg("%s.%s = '%s' accepted", section, key, value);
	snprintf(name, sizeof(name), "%s.%s", section, key);
	assert_contains(err, name);
	assert_true(same);
}

static void
test_defaults(void **state)
{
	struct cfg *cfg = cfg_create();

	(void)state;

	assert_int_equal(cfg_int(cfg, CFG_CLUSTER_SLOTS), 16);
	assert_string_equal(cfg_str(cfg, CFG_CLUSTER_SLOTS), "16");
	assert_string_equal(cfg_str(cfg, CFG_CLUSTER_ROOT), "/prophet");
	assert_string_equal(cfg_str(cfg, CFG_ZK_HOSTS), "127.0.0.1:2181");
	assert_int_equal(cfg_int(cfg, CFG_ZK_SESSION_TIMEOUT_MS), 10000);
	assert_string_equal(cfg_str(cfg, CFG_REDIS_URL),
			    "redis://127.0.0.1:6379/0");
	assert_string_equal(cfg_str(cfg, CFG_DB_URL),
			    "mysql://prophet@127.0.0.1:3306/prophet");
	assert_string_equal(cfg_str(cfg, CFG_KAFKA_BROKERS), "127.0.0.1:9092");
	assert_string_equal(cfg_str(cfg, CFG_KAFKA_TOPIC_PREFIX), "");
	assert_string_equal(cfg_str(cfg, CFG_KAFKA_INGEST_TOPIC), "");
	assert_string_equal(cfg_str(cfg, CFG_HTTP_LISTEN), "127.0.0.1:7070");
	assert_string_equal(cfg_str(cfg, CFG_WORKER_ID), "");
	assert_string_equal(cfg_str(cfg, CFG_LOG_LEVEL), "info");
	assert_int_equal(cfg_int(cfg, CFG_TASK_MAX_BODY_BYTES), 65536);
	assert_int_equal(cfg_int(cfg, CFG_TASK_MAX_DELAY_MS),
			 INT64_C(315576000000));
	assert_string_equal(cfg_path(cfg), "(defaults)");
	assert_int_equal(cfg_extra_count(cfg, "kafka.producer"), 0);
	assert_int_equal(cfg_extra_count(cfg, "kafka.consumer"), 0);
	cfg_destroy(cfg);
	cfg_destroy(NULL);
}

/* redis.sentinels: empty, or a list of host:port. */
static void
test_sentinels(void **state)
{
	struct cfg *cfg = cfg_create();
	char err[256] = "";

	(void)state;
	assert_string_equal(cfg_str(cfg, CFG_REDIS_SENTINELS), "");
	assert_string_equal(cfg_str(cfg, CFG_REDIS_MASTER_NAME), "prophet");
	assert_int_equal(cfg_set(cfg, "redis", "sentinels",
				 "127.0.0.1:26679,h2:26680,[::1]:26681", err,
				 sizeof(err)),
			 0);
	assert_int_equal(cfg_check_hostport_list("", err, sizeof(err)), 0);
	assert_int_equal(cfg_check_hostport_list("a:1,,b:2", err, sizeof(err)),
			 -1);
	assert_contains(err, "'' is not host:port");
	assert_int_equal(cfg_check_hostport_list("a:1,b", err, sizeof(err)),
			 -1);
	assert_contains(err, "'b' is not host:port");
	assert_int_equal(cfg_check_hostport_list("a:0", err, sizeof(err)), -1);
	assert_int_equal(cfg_check_hostport_list("a:1,", err, sizeof(err)), 0);
	assert_int_equal(
		cfg_set(cfg, "redis", "sentinels", "x:99999", err, sizeof(err)),
		-1);
	assert_contains(err, "redis.sentinels");
	assert_int_equal(
		cfg_set(cfg, "redis", "master_name", "", err, sizeof(err)), -1);
	assert_contains(err, "redis.master_name");
	cfg_destroy(cfg);
}

static void
test_set_errors(void **state)
{
	struct cfg *cfg = cfg_create();
	char err[256] = "";

	(void)state;

	assert_int_equal(
		cfg_set(cfg, "cluster", "slots", "0", err, sizeof(err)), -1);
	assert_contains(err, "cluster.slots");
	assert_contains(err, "out of range");
	assert_int_equal(
		cfg_set(cfg, "cluster", "slots", "abc", err, sizeof(err)), -1);
	assert_contains(err, "cluster.slots");
	assert_contains(err, "not an integer");
	assert_int_equal(cfg_set(cfg, "foo", "bar", "1", err, sizeof(err)), -1);
	assert_contains(err, "unknown key 'foo.bar'");
	assert_int_equal(cfg_set(cfg, "cluster", "nope", "1", err, sizeof(err)),
			 -1);
	assert_contains(err, "unknown key 'cluster.nope'");
	assert_int_equal(cfg_int(cfg, CFG_CLUSTER_SLOTS), 16);

	assert_int_equal(
		cfg_set(cfg, "cluster", "slots", "1024", err, sizeof(err)), 0);
	assert_int_equal(cfg_int(cfg, CFG_CLUSTER_SLOTS), 1024);
	assert_int_equal(
		cfg_set(cfg, "cluster", "slots", "1", err, sizeof(err)), 0);
	assert_int_equal(cfg_int(cfg, CFG_CLUSTER_SLOTS), 1);
	cfg_destroy(cfg);

	set_bad("cluster", "slots", "1025");
	set_bad("cluster", "slots", "-1");
	set_bad("cluster", "slots", "");
	set_bad("cluster", "slots", "32x");
	set_bad("cluster", "slots", "3.5");
	set_bad("cluster", "slots", "99999999999999999999");
	set_bad("zookeeper", "session_timeout_ms", "1999");
	set_bad("task", "max_delay_ms", "999");
	set_ok("task", "max_delay_ms", "3155760000000");
	set_bad("task", "max_delay_ms", "3155760000001");
}

/* value of task.retention in ms, or -1 when refused. */
static int64_t
retention_ms(const char *value)
{
	struct cfg *cfg = cfg_create();
	char err[256] = "";
	int64_t v = -1;

	if (cfg_set(cfg, "task", "retention", value, err, sizeof(err)) == 0)
		v = cfg_int(cfg, CFG_TASK_RETENTION);
	else
		assert_contains(err, "task.retention");
	cfg_destroy(cfg);
	return v;
}

static void
test_durations(void **state)
{
	struct cfg *cfg = cfg_create();

	(void)state;
	assert_int_equal(cfg_int(cfg, CFG_TASK_RETENTION), INT64_C(604800000));
	assert_string_equal(cfg_str(cfg, CFG_TASK_RETENTION), "7d");
	assert_int_equal(cfg_int(cfg, CFG_TASK_LOG_RETENTION), 0);
	assert_int_equal(cfg_int(cfg, CFG_TASK_PRUNE_INTERVAL), 60000);
	cfg_destroy(cfg);
	assert_int_equal(retention_ms("0"), 0);
	assert_int_equal(retention_ms("1500"), 1500);
	assert_int_equal(retention_ms("250ms"), 250);
	assert_int_equal(retention_ms("60s"), 60000);
	assert_int_equal(retention_ms(" 60s "), 60000);
	assert_int_equal(retention_ms("5m"), 300000);
	assert_int_equal(retention_ms("24h"), INT64_C(86400000));
	assert_int_equal(retention_ms("7d"), INT64_C(604800000));
	assert_int_equal(retention_ms("36525d"), INT64_C(3155760000000));
	assert_int_equal(retention_ms("36526d"), -1); /* above the maximum */
	assert_int_equal(retention_ms(""), -1);
	assert_int_equal(retention_ms("-1s"), -1);
	assert_int_equal(retention_ms("1.5h"), -1);
	assert_int_equal(retention_ms("7 d"), -1);
	assert_int_equal(retention_ms("7w"), -1);
	assert_int_equal(retention_ms("s"), -1);
	assert_int_equal(retention_ms("7dd"), -1);
	assert_int_equal(retention_ms("99999999999999999999d"), -1);
	assert_int_equal(retention_ms("9223372036854775807d"), -1);
	set_bad("task", "prune_interval", "50ms");
	set_ok("task", "prune_interval", "100ms");
	set_ok("task", "archive_topic", "");
	set_ok("task", "archive_topic", "prophet.archive");
	set_bad("task", "archive_topic", "a b");
	/* Lists the daemons parse at start: refused by --check-config too
	 * (they passed it, then the manager or notifier stopped at start). */
	set_ok("http", "topics_allowed", "");
	set_ok("http", "topics_allowed", "orders, billing.eu,x_y");
	set_bad("http", "topics_allowed", "orders,bad!topic");
	set_bad("http", "topics_allowed", "^orders");
	set_ok("notifier", "topics", "orders, ^prod\\..*");
	set_bad("notifier", "topics", "^[bad");
	set_bad("notifier", "topics", "orders,bad!topic");
}

static void
test_set_arg(void **state)
{
	struct cfg *cfg = cfg_create();
	const char *k, *v;
	char err[256] = "";

	(void)state;

	assert_int_equal(cfg_set_arg(cfg, "cluster.slots=32", err, sizeof(err)),
			 0);
	assert_int_equal(cfg_int(cfg, CFG_CLUSTER_SLOTS), 32);
	assert_int_equal(
		cfg_set_arg(cfg, "http.listen=[::1]:8080", err, sizeof(err)),
		0);
	assert_string_equal(cfg_str(cfg, CFG_HTTP_LISTEN), "[::1]:8080");
	/* Only the first '=' separates the value. */
	assert_int_equal(cfg_set_arg(cfg, "redis.url=redis://:a=b@h:6379/1",
				     err, sizeof(err)),
			 0);
	assert_string_equal(cfg_str(cfg, CFG_REDIS_URL),
			    "redis://:a=b@h:6379/1");
	assert_int_equal(
		cfg_set_arg(cfg, "kafka.topic_prefix=", err, sizeof(err)), 0);
	assert_string_equal(cfg_str(cfg, CFG_KAFKA_TOPIC_PREFIX), "");

	assert_int_equal(cfg_set_arg(cfg, "kafka.producer.compression.type=lz4",
				     err, sizeof(err)),
			 0);
	assert_int_equal(cfg_extra_count(cfg, "kafka.producer"), 1);
	assert_int_equal(cfg_extra_count(cfg, "kafka.consumer"), 0);
	cfg_extra_get(cfg, "kafka.producer", 0, &k, &v);
	assert_string_equal(k, "compression.type");
	assert_string_equal(v, "lz4");
	assert_int_equal(cfg_set_arg(cfg,
				     "kafka.producer.compression.type=zstd",
				     err, sizeof(err)),
			 0);
	assert_int_equal(cfg_extra_count(cfg, "kafka.producer"), 1);
	cfg_extra_get(cfg, "kafka.producer", 0, &k, &v);
	assert_string_equal(v, "zstd");
	assert_int_equal(cfg_set_arg(cfg, "kafka.consumer.fetch.wait.max.ms=5",
				     err, sizeof(err)),
			 0);
	assert_int_equal(cfg_extra_count(cfg, "kafka.consumer"), 1);
	cfg_extra_get(cfg, "kafka.consumer", 0, &k, &v);
	assert_string_equal(k, "fetch.wait.max.ms");
	assert_string_equal(v, "5");
	cfg_extra_get(cfg, "kafka.consumer", 1, &k, &v);
	assert_null(k);
	assert_null(v);

	assert_int_equal(cfg_set_arg(cfg, "cluster.slots", err, sizeof(err)),
			 -1);
	assert_contains(err, "cluster.slots");
	assert_contains(err, "section.key=value");
	assert_int_equal(cfg_set_arg(cfg, "slots=5", err, sizeof(err)), -1);
	assert_contains(err, "section.key=value");
	assert_int_equal(cfg_set_arg(cfg, ".slots=5", err, sizeof(err)), -1);
	assert_int_equal(cfg_set_arg(cfg, "cluster.=5", err, sizeof(err)), -1);
	assert_int_equal(cfg_set_arg(cfg, "=5", err, sizeof(err)), -1);
	assert_int_equal(cfg_set_arg(cfg, "cluster.slots=0", err, sizeof(err)),
			 -1);
	assert_contains(err, "cluster.slots");
	assert_int_equal(cfg_set_arg(cfg, "foo.bar=1", err, sizeof(err)), -1);
	assert_contains(err, "unknown key 'foo.bar'");
	assert_int_equal(cfg_int(cfg, CFG_CLUSTER_SLOTS), 32);
	cfg_destroy(cfg);
}

/* A --set outranks the file on SIGHUP as at start: reloads dropped it, so
 * a manager given http.tokens_file with --set turned its tokens off. */
static void
test_reload_keeps_set(void **state)
{
	struct cfg *cfg = cfg_create();
	struct tmpconf tc;
	char err[512] = "";
	FILE *fp;

	(void)state;
	tmpconf_write(&tc, "[http]\ntokens_file = /etc/prophet/a\n");
	assert_int_equal(cfg_load_file(cfg, tc.path, err, sizeof(err)), 0);
	assert_int_equal(cfg_set_arg(cfg, "http.tokens_file=/etc/prophet/b",
				     err, sizeof(err)),
			 0);
	fp = fopen(tc.path, "w");
	assert_non_null(fp);
	fputs("[http]\ntokens_file = /etc/prophet/c\n[log]\nlevel = debug\n",
	      fp);
	assert_int_equal(fclose(fp), 0);
	assert_int_equal(cfg_reload(cfg, err, sizeof(err)), 0);
	assert_string_equal(cfg_str(cfg, CFG_HTTP_TOKENS_FILE),
			    "/etc/prophet/b");
	assert_string_equal(cfg_str(cfg, CFG_LOG_LEVEL), "debug");
	tmpconf_remove(&tc);
	cfg_destroy(cfg);
}

static void
test_load_file(void **state)
{
	struct cfg *cfg = cfg_create();
	struct tmpconf tc;
	const char *k, *v;
	char err[512] = "";

	(void)state;

	tmpconf_write(&tc, "; a comment\n"
			   "[cluster]\n"
			   "root = /prod/prophet\n"
			   "slots = 64\n"
			   "\n"
			   "[http]\n"
			   "listen = 0.0.0.0:8080   ; all interfaces\n"
			   "[worker]\n"
			   "id = w-1\n"
			   "[kafka.producer]\n"
			   "compression.type = lz4\n"
			   "linger.ms = 5\n");
	assert_int_equal(cfg_load_file(cfg, tc.path, err, sizeof(err)), 0);
	assert_string_equal(cfg_str(cfg, CFG_CLUSTER_ROOT), "/prod/prophet");
	assert_int_equal(cfg_int(cfg, CFG_CLUSTER_SLOTS), 64);
	assert_string_equal(cfg_str(cfg, CFG_HTTP_LISTEN), "0.0.0.0:8080");
	assert_string_equal(cfg_str(cfg, CFG_WORKER_ID), "w-1");
	assert_string_equal(cfg_str(cfg, CFG_REDIS_URL),
			    "redis://127.0.0.1:6379/0");
	assert_string_equal(cfg_path(cfg), tc.path);
	assert_int_equal(cfg_extra_count(cfg, "kafka.producer"), 2);
	cfg_extra_get(cfg, "kafka.producer", 0, &k, &v);
	assert_string_equal(k, "compression.type");
	assert_string_equal(v, "lz4");
	cfg_extra_get(cfg, "kafka.producer", 1, &k, &v);
	assert_string_equal(k, "linger.ms");
	assert_string_equal(v, "5");
	tmpconf_remove(&tc);
	cfg_destroy(cfg);
}

static void
expect_load_error(const char *text, const char *line, const char *what)
{
	struct cfg *cfg = cfg_create();
	struct tmpconf tc;
	char err[512] = "", want[128];
	int rc;

	tmpconf_write(&tc, text);
	rc = cfg_load_file(cfg, tc.path, err, sizeof(err));
	snprintf(want, sizeof(want), "%s:%s:", tc.path, line);
	tmpconf_remove(&tc);
	cfg_destroy(cfg);
	assert_int_equal(rc, -1);
	assert_contains(err, want);
	assert_contains(err, what);
}

static void
test_load_errors(void **state)
{
	struct cfg *cfg = cfg_create();
	char err[512] = "";

	(void)state;

	expect_load_error("[cluster]\n"
			  "slots = 32\n"
			  "this line has no equals sign\n"
			  "root = /x\n",
			  "3", "syntax error");
	expect_load_error("[cluster]\n"
			  "root = /prophet\n"
			  "\n"
			  "slots = 0\n",
			  "4", "cluster.slots");
	expect_load_error("[redis]\n"
			  "url = http://127.0.0.1:6379/0\n",
			  "2", "redis.url");
	expect_load_error("[cluster]\n"
			  "slots = 16\n"
			  "[foo]\n"
			  "bar = 1\n",
			  "4", "unknown key 'foo.bar'");
	/* The first error is the one reported. */
	expect_load_error("[cluster]\n"
			  "slots = abc\n"
			  "root = relative\n",
			  "2", "cluster.slots");

	assert_int_equal(cfg_load_file(cfg, "/tmp/prophet-test-no-such-file",
				       err, sizeof(err)),
			 -1);
	assert_contains(err, "/tmp/prophet-test-no-such-file");
	assert_contains(err, "cannot open");
	assert_string_equal(cfg_path(cfg), "(defaults)");
	cfg_destroy(cfg);
}

/*
 * A syntax error followed by a bad value: the message must describe the
 * line it names, not the later value error.
 */
static void
test_load_syntax_then_bad_value(void **state)
{
	(void)state;

	expect_load_error("[cluster\n"
			  "slots = 32\n",
			  "1", "syntax error");
	expect_load_error("[cluster]\n"
			  "slots = 32\n"
			  "garbage\n"
			  "root = relative\n",
			  "3", "syntax error");
}

static void
test_check_urls(void **state)
{
	(void)state;

	set_ok("redis", "url", "redis://127.0.0.1:6379/0");
	set_ok("redis", "url", "redis://:secret@redis.internal:6380/3");
	set_ok("redis", "url", "redis://[::1]:6379");
	set_ok("redis", "url", "redis://h");
	set_bad("redis", "url", "http://127.0.0.1:6379/0");
	set_bad("redis", "url", "rediss://127.0.0.1:6379/0");
	set_bad("redis", "url", "127.0.0.1:6379");
	set_bad("redis", "url", "");
	set_bad("redis", "url", "redis://h:6379/abc");
	set_bad("redis", "url", "redis://h:0/0");
	set_bad("redis", "url", "redis://h:port/0");

	set_ok("db", "url", "mysql://user@host/db");
	set_ok("db", "url", "mysql://u:p%40ss@10.0.0.5:3306/prophet");
	set_bad("db", "url", "mysql://host/db");
	set_bad("db", "url", "mysql://user@host");
	set_bad("db", "url", "mysql://user@host/");
	set_bad("db", "url", "postgres://user@host/db");
	set_bad("db", "url", "user@host/db");
}

static void
test_check_values(void **state)
{
	char *s;

	(void)state;

	set_ok("cluster", "root", "/prophet");
	set_ok("cluster", "root", "/a/b-c");
	set_bad("cluster", "root", "prophet");
	set_bad("cluster", "root", "/prophet/");
	set_bad("cluster", "root", "/");
	set_bad("cluster", "root", "");
	set_bad("cluster", "root", "/a//b");

	set_ok("http", "listen", "127.0.0.1:7070");
	set_ok("http", "listen", "0.0.0.0:80");
	set_ok("http", "listen", "[::1]:7070");
	set_ok("http", "listen", "localhost:65535");
	set_bad("http", "listen", "7070");
	set_bad("http", "listen", "localhost");
	set_bad("http", "listen", ":7070");
	set_bad("http", "listen", "h:");
	set_bad("http", "listen", "h:0");
	set_bad("http", "listen", "h:65536");
	set_bad("http", "listen", "h:80x");
	set_bad("worker", "http_listen", "nope");

	set_ok("worker", "id", "");
	set_ok("worker", "id", "worker-1.host_a");
	set_bad("worker", "id", "w 1");
	set_bad("worker", "id", "w/1");
	set_bad("worker", "id", "w:1");
	set_bad("worker", "id", "w\xc3\xa9");
	s = xmalloc(102);
	memset(s, 'w', 101);
	s[101] = '\0';
	set_bad("worker", "id", s);
	s[100] = '\0';
	set_ok("worker", "id", s);
	xfree(s);

	set_ok("log", "level", "debug");
	set_ok("log", "level", "info");
	set_ok("log", "level", "warn");
	set_ok("log", "level", "error");
	set_bad("log", "level", "verbose");
	set_bad("log", "level", "");

	set_ok("kafka", "topic_prefix", "prod.");
	set_bad("kafka", "topic_prefix", "a/b");

	set_ok("notifier", "callback_networks_allowed", "");
	set_ok("notifier", "callback_networks_allowed",
	       "127.0.0.0/8, ::1/128 10.1.0.0/16");
	set_bad("notifier", "callback_networks_allowed", "localhost");
	set_bad("notifier", "callback_networks_allowed", "10.0.0.0/33");
	set_ok("notifier", "retry_topic", "my.retries_1-x");
	set_bad("notifier", "retry_topic", "");
	set_bad("notifier", "retry_topic", "a b");
	set_bad("notifier", "retry_topic", "..");
	set_bad("notifier", "dead_letter_topic", "x/y");
	set_bad("notifier", "max_response_bytes", "10");
	set_bad("zookeeper", "hosts", "");
	set_bad("kafka", "brokers", "");
}

/* The rules between keys, each error naming the key to change. */
static void
test_validate(void **state)
{
	struct cfg *cfg = cfg_create();
	char err[256], topic[201];

	(void)state;
	assert_int_equal(cfg_validate(cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg_set(cfg, "notifier", "timeout_ms", "40000", err,
				 sizeof(err)),
			 0);
	assert_int_equal(cfg_validate(cfg, err, sizeof(err)), -1);
	assert_contains(err, "notifier.max_timeout_ms");
	assert_int_equal(cfg_set(cfg, "notifier", "max_timeout_ms", "40000",
				 err, sizeof(err)),
			 0);
	assert_int_equal(cfg_validate(cfg, err, sizeof(err)), 0);

	/* <topic_prefix><retry_topic> is a Kafka topic: 249 at most */
	memset(topic, 'r', 200);
	topic[200] = '\0';
	assert_int_equal(cfg_set(cfg, "notifier", "retry_topic", topic, err,
				 sizeof(err)),
			 0);
	assert_int_equal(cfg_validate(cfg, err, sizeof(err)), 0);
	assert_int_equal(cfg_set(cfg, "kafka", "topic_prefix",
				 "0123456789012345678901234567890123456789"
				 "012345678",
				 err, sizeof(err)),
			 0);
	assert_int_equal(cfg_validate(cfg, err, sizeof(err)), 0); /* 249 */
	assert_int_equal(cfg_set(cfg, "kafka", "topic_prefix",
				 "0123456789012345678901234567890123456789"
				 "0123456789",
				 err, sizeof(err)),
			 0);
	assert_int_equal(cfg_validate(cfg, err, sizeof(err)), -1);
	assert_contains(err, "notifier.retry_topic");
	assert_contains(err, "250");
	assert_int_equal(
		cfg_set(cfg, "notifier", "retry_topic", "r", err, sizeof(err)),
		0);
	assert_int_equal(cfg_set(cfg, "notifier", "dead_letter_topic", topic,
				 err, sizeof(err)),
			 0);
	assert_int_equal(cfg_validate(cfg, err, sizeof(err)), -1);
	assert_contains(err, "notifier.dead_letter_topic");
	assert_int_equal(cfg_set(cfg, "notifier", "dead_letter_topic", "r", err,
				 sizeof(err)),
			 0);
	assert_int_equal(cfg_validate(cfg, err, sizeof(err)), -1);
	assert_contains(err, "notifier.dead_letter_topic");
	cfg_destroy(cfg);
}

static char *
example_text(void)
{
	FILE *fp = tmpfile();
	char *buf;
	long n;

	assert_non_null(fp);
	cfg_write_example(fp);
	n = ftell(fp);
	assert_true(n > 0);
	rewind(fp);
	buf = xmalloc((size_t)n + 1);
	assert_int_equal(fread(buf, 1, (size_t)n, fp), (size_t)n);
	buf[n] = '\0';
	fclose(fp);
	return buf;
}

static int
count_of(const char *haystack, const char *needle)
{
	int n = 0;

	for (const char *p = haystack; (p = strstr(p, needle)) != NULL; p++)
		n++;
	return n;
}

static void
test_write_example(void **state)
{
	static const char *const sections[] = {
		"[cluster]\n", "[zookeeper]\n",	     "[redis]\n", "[db]\n",
		"[kafka]\n",   "[http]\n",	     "[task]\n",  "[worker]\n",
		"[log]\n",     "[kafka.producer]\n", NULL};
	char *text = example_text();

	(void)state;

	for (int i = 0; sections[i]; i++)
		if (count_of(text, sections[i]) != 1)
			fail_msg("section %s appears %d times", sections[i],
				 count_of(text, sections[i]));
	assert_contains(text, "\nslots = 16\n");
	assert_contains(text, "\nroot = /prophet\n");
	assert_contains(text, "\nlisten = 127.0.0.1:7070\n");
	assert_contains(text, "\nurl = redis://127.0.0.1:6379/0\n");
	assert_contains(text, "\nlevel = info\n");
	assert_contains(text, "compression.type");
	xfree(text);
}

/* The example loads back and changes nothing. */
static void
test_example_loads(void **state)
{
	struct cfg *cfg = cfg_create(), *ref = cfg_create();
	char *text = example_text();
	char err[512] = "";
	struct tmpconf tc;

	(void)state;

	tmpconf_write(&tc, text);
	if (cfg_load_file(cfg, tc.path, err, sizeof(err)) != 0)
		fail_msg("example rejected: %s", err);
	for (int i = 0; i < CFG__COUNT; i++) {
		assert_string_equal(cfg_str(cfg, (enum cfg_id)i),
				    cfg_str(ref, (enum cfg_id)i));
		assert_int_equal(cfg_int(cfg, (enum cfg_id)i),
				 cfg_int(ref, (enum cfg_id)i));
	}
	assert_int_equal(cfg_extra_count(cfg, "kafka.producer"), 0);
	tmpconf_remove(&tc);
	xfree(text);
	cfg_destroy(ref);
	cfg_destroy(cfg);
}

static void
test_url_parse(void **state)
{
	char err[256] = "";
	struct url u;

	(void)state;

	assert_int_equal(url_parse("mysql://prophet:p%40ss@db.example.com:3306/"
				   "prophet",
				   &u, err, sizeof(err)),
			 0);
	assert_string_equal(u.scheme, "mysql");
	assert_string_equal(u.user, "prophet");
	assert_string_equal(u.password, "p@ss");
	assert_string_equal(u.host, "db.example.com");
	assert_int_equal(u.port, 3306);
	assert_string_equal(u.path, "prophet");
	url_clear(&u);
	assert_null(u.scheme);
	assert_null(u.host);

	assert_int_equal(
		url_parse("redis://[::1]:6379/0", &u, err, sizeof(err)), 0);
	assert_string_equal(u.scheme, "redis");
	assert_string_equal(u.host, "::1");
	assert_int_equal(u.port, 6379);
	assert_string_equal(u.path, "0");
	assert_null(u.user);
	assert_null(u.password);
	url_clear(&u);

	assert_int_equal(url_parse("redis://h", &u, err, sizeof(err)), 0);
	assert_string_equal(u.host, "h");
	assert_int_equal(u.port, 0);
	assert_null(u.path);
	assert_null(u.user);
	assert_null(u.password);
	url_clear(&u);

	assert_int_equal(url_parse("redis://h/", &u, err, sizeof(err)), 0);
	assert_null(u.path);
	url_clear(&u);

	assert_int_equal(
		url_parse("redis://:s3cret@h:6380", &u, err, sizeof(err)), 0);
	assert_string_equal(u.password, "s3cret");
	assert_string_equal(u.host, "h");
	assert_int_equal(u.port, 6380);
	url_clear(&u);

	assert_int_equal(url_parse("mysql://bob@h/db", &u, err, sizeof(err)),
			 0);
	assert_string_equal(u.user, "bob");
	assert_null(u.password);
	url_clear(&u);

	assert_int_equal(
		url_parse("x://u%3Ax:a%2Fb%25%zz%4@h", &u, err, sizeof(err)),
		0);
	assert_string_equal(u.user, "u:x");
	assert_string_equal(u.password, "a/b%%zz%4");
	url_clear(&u);

	/* The last '@' ends the credentials. */
	assert_int_equal(url_parse("x://u:p@ss@h:1/d", &u, err, sizeof(err)),
			 0);
	assert_string_equal(u.password, "p@ss");
	assert_string_equal(u.host, "h");
	url_clear(&u);
}

static void
url_bad(const char *s, const char *what)
{
	char err[256] = "";
	struct url u;

	assert_int_equal(url_parse(s, &u, err, sizeof(err)), -1);
	assert_contains(err, what);
	assert_null(u.scheme);
	assert_null(u.user);
	assert_null(u.password);
	assert_null(u.host);
	assert_null(u.path);
}

static void
test_url_errors(void **state)
{
	(void)state;

	url_bad("127.0.0.1:6379", "scheme");
	url_bad("://h:1", "scheme");
	url_bad("redis:/h", "scheme");
	url_bad("redis://h:abc/0", "port");
	url_bad("redis://h:0", "port");
	url_bad("redis://h:65536", "port");
	url_bad("redis://h:123456", "port");
	url_bad("redis://h:", "port");
	url_bad("redis://u:p@h:-1/0", "port");
	url_bad("redis://", "host");
	url_bad("redis://u@:1/0", "host");
	url_bad("redis://[::1:6379", "[");
	url_bad("redis://[::1]x", "after host");
}

static void
test_hostport_parse(void **state)
{
	char host[64];
	int port = 0;

	(void)state;

	assert_int_equal(
		hostport_parse("127.0.0.1:7070", host, sizeof(host), &port), 0);
	assert_string_equal(host, "127.0.0.1");
	assert_int_equal(port, 7070);
	assert_int_equal(
		hostport_parse("[::1]:6379", host, sizeof(host), &port), 0);
	assert_string_equal(host, "::1");
	assert_int_equal(port, 6379);
	assert_int_equal(
		hostport_parse("localhost:65535", host, sizeof(host), &port),
		0);
	assert_string_equal(host, "localhost");
	assert_int_equal(port, 65535);
	assert_int_equal(hostport_parse("h:1", host, sizeof(host), &port), 0);
	assert_int_equal(port, 1);

	assert_int_equal(hostport_parse("localhost", host, sizeof(host), &port),
			 -1);
	assert_int_equal(hostport_parse(":80", host, sizeof(host), &port), -1);
	assert_int_equal(hostport_parse("[]:80", host, sizeof(host), &port),
			 -1);
	assert_int_equal(hostport_parse("h:", host, sizeof(host), &port), -1);
	assert_int_equal(hostport_parse("h:0", host, sizeof(host), &port), -1);
	assert_int_equal(hostport_parse("h:65536", host, sizeof(host), &port),
			 -1);
	assert_int_equal(hostport_parse("h:8o", host, sizeof(host), &port), -1);
	assert_int_equal(hostport_parse("h:+80", host, sizeof(host), &port),
			 -1);
	/* The host must fit with its NUL. */
	assert_int_equal(hostport_parse("abcd:80", host, 4, &port), -1);
	assert_int_equal(hostport_parse("abc:80", host, 4, &port), 0);
	assert_string_equal(host, "abc");
}

/* Loopback by address, not by how the text starts: "127.example.com" and
 * "localhost.evil.test" are names like any other. */
static void
test_loopback(void **state)
{
	static const char *const yes[] = {
		"127.0.0.1:7070",	"127.1.2.3:80", "[::1]:80",
		"localhost:8080",	"LocalHost:1",	"api.localhost:9",
		"[::ffff:127.0.0.1]:80"};
	static const char *const no[] = {
		"127.example.com:80", "localhost.evil.test:80",
		"0.0.0.0:7070",	      "[::]:80",
		"10.0.0.1:80",	      "[::ffff:10.0.0.1]:80",
		"128.0.0.1:80",	      "127.0.0.1",
		"localhost",	      "[::1]",
		"xlocalhost:80",      ""};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
		if (!url_listen_is_loopback(yes[i]))
			fail_msg("%s: not loopback", yes[i]);
	for (i = 0; i < sizeof(no) / sizeof(no[0]); i++)
		if (url_listen_is_loopback(no[i]))
			fail_msg("%s: loopback", no[i]);
	assert_true(url_host_is_loopback("::1"));
	assert_true(url_host_is_loopback("127.255.255.255"));
	assert_false(url_host_is_loopback("127.0.0"));
	assert_false(url_host_is_loopback("127.0.0.1.nip.io"));
}

/* A secret file of mode 0600 (or mode) holding text; returns its path. */
static void
secret_write(struct tmpconf *tc, const char *text, mode_t mode)
{
	tmpconf_write(tc, text);
	assert_int_equal(chmod(tc->path, mode), 0);
}

static void
test_url_query(void **state)
{
	static const char *const names[] = {"ssl-mode", "ssl-ca", NULL};
	char err[256] = "";
	struct url u;
	char *v;

	(void)state;
	assert_int_equal(url_parse("mysql://u@h:3306/db?ssl-mode=REQUIRED&"
				   "ssl-ca=%2Fetc%2Fca.pem",
				   &u, err, sizeof(err)),
			 0);
	assert_string_equal(u.path, "db");
	assert_string_equal(u.query,
			    "ssl-mode=REQUIRED&ssl-ca=%2Fetc%2Fca.pem");
	v = url_query_get(u.query, "ssl-ca");
	assert_string_equal(v, "/etc/ca.pem");
	xfree(v);
	v = url_query_get(u.query, "ssl-mode");
	assert_string_equal(v, "REQUIRED");
	xfree(v);
	assert_null(url_query_get(u.query, "ssl"));
	assert_int_equal(url_query_check(u.query, names, err, sizeof(err)), 0);
	url_clear(&u);
	assert_null(u.query);

	assert_int_equal(url_query_check("ssl-mode=a&sslmode=b", names, err,
					 sizeof(err)),
			 -1);
	assert_contains(err, "'sslmode'");
	assert_int_equal(
		url_query_check("ssl-ca=a&ssl-ca=b", names, err, sizeof(err)),
		-1);
	assert_contains(err, "twice");
	assert_int_equal(url_query_check(NULL, names, err, sizeof(err)), 0);

	/* a '?' in the credentials is not a query: only after the path */
	assert_int_equal(url_parse("redis://:p?w@h:1/0", &u, err, sizeof(err)),
			 0);
	assert_string_equal(u.password, "p?w");
	assert_string_equal(u.path, "0");
	assert_null(u.query);
	url_clear(&u);
}

/* A URL that does not parse: the message must not quote the password. */
static void
test_url_errors_hide_password(void **state)
{
	static const char *const bad[] = {
		"mysql//prophet:hunter2@h:3306/db",
		"mysql://prophet:hun/ter2@h:3306/db",
		"mysql://prophet:hunter2@h:99999/db",
	};
	char err[256];

	(void)state;
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct cfg *cfg = cfg_create();

		err[0] = '\0';
		assert_int_equal(
			cfg_set(cfg, "db", "url", bad[i], err, sizeof(err)),
			-1);
		assert_contains(err, "db.url");
		if (strstr(err, "hunter2") || strstr(err, "hun") ||
		    strstr(err, "ter2"))
			fail_msg("'%s' quotes the password", err);
		cfg_destroy(cfg);
	}
}

/* cfg_validate after setting section.key=value: 0, or -1 naming what. */
static void
validate_with(const char *const *kv, const char *what)
{
	struct cfg *cfg = cfg_create();
	char err[512] = "";
	int rc;

	for (size_t i = 0; kv[i] != NULL; i += 3)
		if (cfg_set(cfg, kv[i], kv[i + 1], kv[i + 2], err,
			    sizeof(err)) < 0)
			fail_msg("%s.%s rejected: %s", kv[i], kv[i + 1], err);
	rc = cfg_validate(cfg, err, sizeof(err));
	cfg_destroy(cfg);
	if (what == NULL && rc != 0)
		fail_msg("refused: %s", err);
	if (what != NULL && rc == 0)
		fail_msg("accepted, want an error naming %s", what);
	if (what != NULL)
		assert_contains(err, what);
}

static void
db_tls_of(const char *url, const char *mode, const char *ca,
	  enum cfg_tls_mode want, const char *want_ca)
{
	struct cfg *cfg = cfg_create();
	struct cfg_db_tls t;
	char err[512] = "";

	assert_int_equal(cfg_set(cfg, "db", "url", url, err, sizeof(err)), 0);
	assert_int_equal(cfg_set(cfg, "db", "tls_mode", mode, err, sizeof(err)),
			 0);
	assert_int_equal(cfg_set(cfg, "db", "tls_ca", ca, err, sizeof(err)), 0);
	if (cfg_db_tls(cfg, &t, err, sizeof(err)) < 0)
		fail_msg("%s mode '%s' ca '%s': %s", url, mode, ca, err);
	assert_int_equal(t.mode, want);
	if (want_ca == NULL)
		assert_null(t.ca);
	else
		assert_string_equal(t.ca, want_ca);
	cfg_db_tls_clear(&t);
	cfg_destroy(cfg);
}

static void
test_db_tls(void **state)
{
	(void)state;

	set_ok("db", "url", "mysql://u@h/db?ssl-mode=VERIFY_IDENTITY");
	set_ok("db", "url", "mysql://u@h/db?ssl-mode=verify_ca&ssl-ca=/ca.pem");
	set_ok("db", "url",
	       "mysql://u@h/db?ssl-mode=REQUIRED&ssl-cert=/c&ssl-key=/k");
	set_bad("db", "url", "mysql://u@h/db?ssl-mode=PREFERRED");
	set_bad("db", "url", "mysql://u@h/db?ssl-mode=");
	set_bad("db", "url", "mysql://u@h/db?ssl-mode=ON");
	set_bad("db", "url", "mysql://u@h/db?sslmode=REQUIRED");
	set_bad("db", "url", "mysql://u@h/db?ssl-ca=/a&ssl-ca=/b");
	set_ok("db", "tls_mode", "");
	set_ok("db", "tls_mode", "VERIFY_IDENTITY");
	set_ok("db", "tls_mode", "disabled");
	set_bad("db", "tls_mode", "PREFERRED");
	set_bad("db", "tls_mode", "yes");

	db_tls_of("mysql://u@h/db", "", "", CFG_TLS_DISABLED, NULL);
	/* a CA alone: verified, name included */
	db_tls_of("mysql://u@h/db", "", "/ca.pem", CFG_TLS_VERIFY_IDENTITY,
		  "/ca.pem");
	db_tls_of("mysql://u@h/db?ssl-ca=/u.pem", "", "",
		  CFG_TLS_VERIFY_IDENTITY, "/u.pem");
	db_tls_of("mysql://u@h/db?ssl-mode=VERIFY_CA", "", "/ca.pem",
		  CFG_TLS_VERIFY_CA, "/ca.pem");
	db_tls_of("mysql://u@h/db", "required", "", CFG_TLS_REQUIRED, NULL);
	/* the same in both places is no conflict */
	db_tls_of("mysql://u@h/db?ssl-mode=VERIFY_CA&ssl-ca=/ca.pem",
		  "VERIFY_CA", "/ca.pem", CFG_TLS_VERIFY_CA, "/ca.pem");

	{
		const char *const conflict[] = {
			"db", "url",	  "mysql://u@h/db?ssl-mode=REQUIRED",
			"db", "tls_mode", "VERIFY_IDENTITY",
			NULL};
		const char *const disabled_ca[] = {"db", "tls_mode", "DISABLED",
						   "db", "tls_ca",   "/ca.pem",
						   NULL};
		const char *const required_ca[] = {
			"db", "url",	"mysql://u@h/db?ssl-mode=REQUIRED",
			"db", "tls_ca", "/ca.pem",
			NULL};
		const char *const verify_ca_alone[] = {"db", "tls_mode",
						       "VERIFY_CA", NULL};
		const char *const cert_alone[] = {"db", "tls_mode", "REQUIRED",
						  "db", "tls_cert", "/c",
						  NULL};
		const char *const ca_conflict[] = {
			"db", "url",	"mysql://u@h/db?ssl-ca=/a.pem",
			"db", "tls_ca", "/b.pem",
			NULL};

		validate_with(conflict, "db.tls_mode");
		validate_with(disabled_ca, "db.tls_mode");
		validate_with(required_ca, "db.tls_ca");
		validate_with(verify_ca_alone, "db.tls_ca");
		validate_with(cert_alone, "db.tls_key");
		validate_with(ca_conflict, "db.tls_ca");
	}
}

static void
test_links_validate(void **state)
{
	const char *const db_pw_twice[] = {
		"db", "url", "mysql://u:pw@h/db", "db", "password_file",
		"/f", NULL};
	const char *const db_pw_file[] = {
		"db", "url", "mysql://u@h/db", "db", "password_file",
		"/f", NULL};
	const char *const redis_pw_twice[] = {
		"redis", "url",		  "redis://u:pw@h:6379/0",
		"redis", "password_file", "/f",
		NULL};
	const char *const redis_tls_plain[] = {"redis", "tls_ca", "/ca.pem",
					       NULL};
	const char *const kafka_tls_plain[] = {"kafka", "tls_ca", "/ca.pem",
					       NULL};
	const char *const kafka_tls[] = {
		"kafka",  "security_protocol", "sasl_ssl", "kafka",
		"tls_ca", "/ca.pem",	       NULL};
	const char *const kafka_cert_alone[] = {"kafka",    "security_protocol",
						"ssl",	    "kafka",
						"tls_cert", "/c.pem",
						NULL};
	const char *const token_twice[] = {"http",	 "token", "abc", "http",
					   "token_file", "/f",	  NULL};

	(void)state;
	validate_with(db_pw_twice, "db.password_file");
	validate_with(db_pw_file, NULL);
	validate_with(redis_pw_twice, "redis.password_file");
	validate_with(redis_tls_plain, "redis.tls_ca");
	validate_with(kafka_tls_plain, "kafka.tls_ca");
	validate_with(kafka_tls, NULL);
	validate_with(kafka_cert_alone, "kafka.tls_key");
	validate_with(token_twice, "http.token_file");

	set_ok("redis", "url", "redis://prophet@h:6379/0");
	set_ok("redis", "url", "redis://prophet:pw@h:6379/0");
	set_bad("redis", "url", "redis://h:6379/0?tls=1");
#ifndef HAVE_HIREDIS_SSL
	{
		struct cfg *cfg = cfg_create();
		char err[512] = "";

		assert_int_equal(cfg_set(cfg, "redis", "url",
					 "rediss://h:6380/0", err, sizeof(err)),
				 -1);
		assert_contains(err, "redis.url");
		assert_contains(err, "hiredis_ssl");
		cfg_destroy(cfg);
	}
#endif
	set_ok("kafka", "security_protocol", "sasl_ssl");
	set_ok("kafka", "security_protocol", "SSL");
	set_bad("kafka", "security_protocol", "tls");
	set_ok("kafka", "sasl_mechanism", "SCRAM-SHA-256");
	set_ok("kafka", "sasl_mechanism", "PLAIN");
	set_bad("kafka", "sasl_mechanism", "GSSAPI");
}

/* [kafka.client], [kafka.producer], [kafka.consumer] pass librdkafka
 * properties through, except those Prophet sets: refused by name. */
static void
test_kafka_passthrough(void **state)
{
	static const char *const refused[][3] = {
		{"kafka.producer", "enable.idempotence", "safety"},
		{"kafka.producer", "message.timeout.ms", "never dropped"},
		{"kafka.producer", "delivery.timeout.ms", "never dropped"},
		{"kafka.producer", "acks", "acks=all"},
		{"kafka.client", "request.required.acks", "acks=all"},
		{"kafka.client", "enable.idempotence", "safety"},
		{"kafka.producer", "linger.ms", "kafka.linger_ms"},
		{"kafka.producer", "queue.buffering.max.messages",
		 "kafka.queue_max"},
		{"kafka.consumer", "enable.auto.commit", "at-least-once"},
		{"kafka.client", "enable.auto.offset.store", "at-least-once"},
		{"kafka.consumer", "auto.offset.reset", "skipped"},
		{"kafka.consumer", "group.id", "notifier.group"},
		{"kafka.client", "bootstrap.servers", "kafka.brokers"},
		{"kafka.consumer", "security.protocol",
		 "kafka.security_protocol"},
		{"kafka.producer", "sasl.password", "kafka.sasl_password_file"},
		{"kafka.client", "sasl.mechanisms", "kafka.sasl_mechanism"},
		{"kafka.client", "ssl.ca.location", "kafka.tls_ca"},
	};
	static const char *const allowed[][2] = {
		{"kafka.producer", "compression.type"},
		{"kafka.client", "client.rack"},
		{"kafka.client", "ssl.endpoint.identification.algorithm"},
		{"kafka.consumer", "session.timeout.ms"},
		{"kafka.consumer", "max.poll.interval.ms"},
		/* a consumer property among producers is not Prophet's */
		{"kafka.producer", "enable.auto.commit"},
		{"kafka.consumer", "message.timeout.ms"},
	};
	char err[512], name[128];

	(void)state;
	for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
		const char *const kv[] = {refused[i][0], refused[i][1], "x",
					  NULL};

		snprintf(name, sizeof(name), "%s.%s", refused[i][0],
			 refused[i][1]);
		validate_with(kv, name);
		validate_with(kv, refused[i][2]);
		assert_int_equal(kafka_passthrough_check(refused[i][0],
							 refused[i][1], err,
							 sizeof(err)),
				 -1);
	}
	for (size_t i = 0; i < sizeof(allowed) / sizeof(allowed[0]); i++) {
		const char *const kv[] = {allowed[i][0], allowed[i][1], "1",
					  NULL};

		validate_with(kv, NULL);
	}
	/* and --set reaches the new section too */
	{
		struct cfg *cfg = cfg_create();
		const char *k, *v;

		assert_int_equal(cfg_set_arg(cfg, "kafka.client.client.rack=a",
					     err, sizeof(err)),
				 0);
		assert_int_equal(cfg_extra_count(cfg, "kafka.client"), 1);
		cfg_extra_get(cfg, "kafka.client", 0, &k, &v);
		assert_string_equal(k, "client.rack");
		assert_string_equal(v, "a");
		cfg_destroy(cfg);
	}
}

/* [section@program]: one program's keys over the section's own, wherever
 * they stand; the others' checked all the same. */
static void
test_program_sections(void **state)
{
	static const char text[] = "[db@worker]\n"
				   "url = mysql://w@h/db\n"
				   "[db]\n"
				   "url = mysql://m@h/db\n"
				   "[kafka@notifier]\n"
				   "sasl_username = prophet-notifier\n"
				   "[kafka.producer@worker]\n"
				   "compression.type = lz4\n";
	static const char *const progs[][3] = {
		{"worker", "mysql://w@h/db", ""},
		{"manager", "mysql://m@h/db", ""},
		{"notifier", "mysql://m@h/db", "prophet-notifier"},
	};
	char err[512] = "";
	struct tmpconf tc;

	(void)state;
	tmpconf_write(&tc, text);
	for (size_t i = 0; i < sizeof(progs) / sizeof(progs[0]); i++) {
		struct cfg *cfg = cfg_create();

		cfg_set_program(cfg, progs[i][0]);
		if (cfg_load_file(cfg, tc.path, err, sizeof(err)) < 0)
			fail_msg("%s: %s", progs[i][0], err);
		assert_string_equal(cfg_str(cfg, CFG_DB_URL), progs[i][1]);
		assert_string_equal(cfg_str(cfg, CFG_KAFKA_SASL_USERNAME),
				    progs[i][2]);
		assert_int_equal(cfg_extra_count(cfg, "kafka.producer"),
				 !strcmp(progs[i][0], "worker"));
		cfg_destroy(cfg);
	}
	tmpconf_remove(&tc);

	expect_load_error("[db@wroker]\nurl = mysql://w@h/db\n", "2",
			  "[section@program]");
	/* another program's bad value is an error here too, with its line */
	expect_load_error("[cluster]\nslots = 16\n[db@notifier]\n"
			  "url = nope\n",
			  "4", "db@notifier");
	expect_load_error("[kafka@worker]\nnope = 1\n", "2",
			  "unknown key 'kafka.nope'");
}

static void
test_secret_files(void **state)
{
	struct cfg *cfg = cfg_create();
	struct tmpconf tc;
	char err[512] = "";
	char *s;

	(void)state;
	assert_null(cfg_secret(cfg, CFG_DB_PASSWORD_FILE, err, sizeof(err)));
	assert_string_equal(err, "");

	secret_write(&tc, "s3cr:t pass\n", 0600);
	assert_int_equal(
		cfg_set(cfg, "db", "password_file", tc.path, err, sizeof(err)),
		0);
	s = cfg_secret(cfg, CFG_DB_PASSWORD_FILE, err, sizeof(err));
	assert_non_null(s);
	assert_string_equal(s, "s3cr:t pass");
	secret_free(s);

	assert_int_equal(chmod(tc.path, 0640), 0);
	assert_null(cfg_secret(cfg, CFG_DB_PASSWORD_FILE, err, sizeof(err)));
	assert_contains(err, "db.password_file");
	assert_contains(err, "chmod 600");
	assert_true(strstr(err, "s3cr") == NULL);
	tmpconf_remove(&tc);

	secret_write(&tc, "", 0600);
	assert_int_equal(cfg_set(cfg, "zookeeper", "auth_file", tc.path, err,
				 sizeof(err)),
			 0);
	assert_null(cfg_secret(cfg, CFG_ZK_AUTH_FILE, err, sizeof(err)));
	assert_contains(err, "zookeeper.auth_file");
	tmpconf_remove(&tc);

	secret_write(&tc, "two\nlines\n", 0600);
	assert_int_equal(
		cfg_set(cfg, "http", "token_file", tc.path, err, sizeof(err)),
		0);
	assert_null(cfg_http_token(cfg, err, sizeof(err)));
	assert_contains(err, "http.token_file");
	tmpconf_remove(&tc);

	assert_int_equal(
		cfg_set(cfg, "http", "token_file", "", err, sizeof(err)), 0);
	assert_int_equal(cfg_set(cfg, "http", "token", "tok-0123456789abc", err,
				 sizeof(err)),
			 0);
	s = cfg_http_token(cfg, err, sizeof(err));
	assert_string_equal(s, "tok-0123456789abc");
	secret_free(s);
	/* a token no manager accepts: too short, a space, not ASCII */
	assert_int_equal(cfg_set(cfg, "http", "token", "tok", err, sizeof(err)),
			 0);
	assert_null(cfg_http_token(cfg, err, sizeof(err)));
	assert_contains(err, "http.token: the token has 3 characters");
	assert_int_equal(cfg_set(cfg, "http", "token", "tok-0123456789 abc",
				 err, sizeof(err)),
			 0);
	assert_null(cfg_http_token(cfg, err, sizeof(err)));
	assert_contains(err, "at character 15");
	assert_null(strstr(err, "0123456789"));
	assert_int_equal(cfg_set(cfg, "http", "token",
				 "tok-0123456789\xc3\xa9"
				 "abc",
				 err, sizeof(err)),
			 0);
	assert_null(cfg_http_token(cfg, err, sizeof(err)));
	assert_contains(err, "non-ASCII");
	assert_int_equal(cfg_set(cfg, "http", "token", "", err, sizeof(err)),
			 0);
	s = cfg_http_token(cfg, err, sizeof(err));
	assert_string_equal(s, "");
	secret_free(s);
	assert_null(cfg_secret(cfg, CFG_KAFKA_SASL_PASSWORD_FILE, err,
			       sizeof(err)));
	cfg_destroy(cfg);
}

/* ZooKeeper's digest identity of user:password, as its
 * DigestAuthenticationProvider computes it. */
static void
test_zk_digest(void **state)
{
	char id[256];

	(void)state;
	zk_digest_id("super:admin", id, sizeof(id));
	assert_string_equal(id, "super:xQJmxLMiHGwaqBvst5y6rkB6HQs=");
	zk_digest_id("prophet:a:b", id, sizeof(id));
	assert_int_equal(strncmp(id, "prophet:", 8), 0);
	assert_int_equal(strlen(id), 8 + 28);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_defaults),
		cmocka_unit_test(test_set_errors),
		cmocka_unit_test(test_sentinels),
		cmocka_unit_test(test_durations),
		cmocka_unit_test(test_set_arg),
		cmocka_unit_test(test_load_file),
		cmocka_unit_test(test_reload_keeps_set),
		cmocka_unit_test(test_load_errors),
		cmocka_unit_test(test_load_syntax_then_bad_value),
		cmocka_unit_test(test_check_urls),
		cmocka_unit_test(test_check_values),
		cmocka_unit_test(test_validate),
		cmocka_unit_test(test_write_example),
		cmocka_unit_test(test_example_loads),
		cmocka_unit_test(test_url_parse),
		cmocka_unit_test(test_url_errors),
		cmocka_unit_test(test_hostport_parse),
		cmocka_unit_test(test_loopback),
		cmocka_unit_test(test_url_query),
		cmocka_unit_test(test_url_errors_hide_password),
		cmocka_unit_test(test_db_tls),
		cmocka_unit_test(test_links_validate),
		cmocka_unit_test(test_kafka_passthrough),
		cmocka_unit_test(test_program_sections),
		cmocka_unit_test(test_secret_files),
		cmocka_unit_test(test_zk_digest),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
