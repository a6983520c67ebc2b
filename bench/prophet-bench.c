/*
 * prophet-bench: load generator and meter for a running Prophet cluster,
 * plus probes of the raw limits of the servers it runs on. See
 * docs/benchmarks.md.
 */
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "bench.h"
#include "secret.h"

volatile int bench_stop;

int64_t
now_us(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

void
sleep_until_mono_us(int64_t t)
{
	struct timespec ts = {(time_t)(t / 1000000),
			      (long)(t % 1000000) * 1000};

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) ==
	       EINTR)
		if (bench_stop)
			return;
}

static volatile sig_atomic_t stop_signal;

static void
on_signal(int sig)
{
	stop_signal = sig;
	bench_stop = 1;
}

/*
 * After an interrupted run has reported what it got: die of the signal, so
 * that a calling shell stops too instead of taking the clean exit as "the
 * program handled it".
 */
static int
finish(int rc)
{
	if (stop_signal) {
		fflush(stdout);
		signal(stop_signal, SIG_DFL);
		raise(stop_signal);
	}
	return rc;
}

static void
usage(FILE *f)
{
	fputs("usage: prophet-bench SCENARIO [options]\n"
	      "\n"
	      "scenarios (each prints a table and one JSON line on stdout):\n"
	      "  ingest     submissions/s accepted (durable), single or batch\n"
	      "  steady     --rate R tasks due per second for --duration s:\n"
	      "             lateness, losses, duplicates\n"
	      "  burst      --count N tasks due within one second: drain time\n"
	      "  far        tasks inside vs beyond the horizon: Redis memory\n"
	      "             vs DB rows\n"
	      "  kafka-raw  librdkafka produce rate, same message size and\n"
	      "             producer settings as a worker; with --rate: "
	      "paced,\n"
	      "             and produce-to-consumer latency (Kafka's own "
	      "share\n"
	      "             of the consumer lateness)\n"
	      "  db-raw     multi-row INSERT rows/s into a scratch copy of\n"
	      "             the tasks table (prepared statements)\n"
	      "  notifier   --count N tasks with a callback to a server run\n"
	      "             here, due within --spread-ms: callbacks/s and\n"
	      "             due -> callback latency (needs a notifier on\n"
	      "             the topic)\n"
	      "  failover   runs --workers W workers of its own "
	      "(--worker-bin,\n"
	      "             --worker-conf), fires a paced stream (--rate, "
	      "2000)\n"
	      "             and --kills K times kills one with SIGKILL: time\n"
	      "             from the kill to the first message of each of its\n"
	      "             slots with a higher prophet-epoch (new owner)\n"
	      "  storage    DB bytes per pending and per finished task, per\n"
	      "             index (InnoDB statistics; needs --db)\n"
	      "  backlog    --count N tasks due 1 h - 1 year ahead (the\n"
	      "             first --near-count in the first hour of it):\n"
	      "             submit rate along the load, DB size, Redis bytes\n"
	      "  horizon    waits for --count tasks to reach the Redis index\n"
	      "             (the horizon loader), with --flush then flushes\n"
	      "             the Redis db and times the rebuild\n"
	      "  pull       tasks taken over HTTP by --clients pull clients\n"
	      "             of one group (next + ack, up to --batch a "
	      "request):\n"
	      "             without --rate --count tasks fired first, then\n"
	      "             drained (tasks/s, beside a raw Kafka consumer's);\n"
	      "             with --rate R for --duration s, due -> handed out\n"
	      "             (and due -> a raw Kafka consumer alongside)\n"
	      "  cleanup    delete Kafka topics starting with --topic-prefix\n"
	      "             and the ZooKeeper tree --zk-root (with --zk)\n"
	      "\n"
	      "options:\n"
	      "  --api URL            manager API (http://127.0.0.1:7070)\n"
	      "  --brokers LIST       Kafka (127.0.0.1:9092)\n"
	      "  --kafka-conf FILE    librdkafka key=value lines for every "
	      "Kafka client\n"
	      "                       (a secure cluster's, as kcat -F)\n"
	      "  --token-file FILE    API bearer token (mode 600)\n"
	      "  --topic-prefix P     the cluster's kafka.topic_prefix\n"
	      "  --topic T            task topic (bench-<scenario>-<tag>)\n"
	      "  --db URL             mysql://user:pass@host:port/db\n"
	      "  --redis HOST:PORT/DB the cluster's Redis (far)\n"
	      "  --slots N            the cluster's cluster.slots (16)\n"
	      "  --worker-metrics U,..  worker base URLs: lateness histogram\n"
	      "  --rate R             steady: tasks due per second (1000;\n"
	      "                       failover: 2000)\n"
	      "  --duration S         steady: seconds (10); ingest/raw: cap;\n"
	      "                       failover: stream cap (30 + 30 per kill)\n"
	      "  --count N            tasks / messages / rows\n"
	      "  --near-count N       far: tasks inside the horizon (=count)\n"
	      "  --conns N            HTTP connections or client threads\n"
	      "  --clients N          pull: pull clients (1)\n"
	      "  --batch N            tasks per POST /v1/tasks/batch\n"
	      "  --single             POST /v1/tasks, one task per request\n"
	      "  --body-size B        task body bytes (100)\n"
	      "  --lead MS            steady/burst/failover: submit this long "
	      "before due\n"
	      "                       (failover: 2000)\n"
	      "  --preload            steady: submit every task first, then "
	      "measure firing alone\n"
	      "  --ledger FILE        steady: write each task's due, accepted, "
	      "fired-at and\n"
	      "                       received times to FILE (TSV)\n"
	      "  --delay-ms MS        ingest: task delay (600000)\n"
	      "  --spread-ms MS       burst: due times within (1000)\n"
	      "  --grace S            wait this long for stragglers (15)\n"
	      "  --settle S           then this long for duplicates (1)\n"
	      "  --linger MS          kafka-raw: linger.ms (2, as a worker)\n"
	      "  --rows-per-stmt N    db-raw: rows per INSERT (500)\n"
	      "  --zk HOSTS --zk-root PATH   cleanup: ZooKeeper tree\n"
	      "  --worker-bin PATH    failover: prophet-worker to run\n"
	      "  --worker-conf FILE   failover: its -c config (the cluster's)\n"
	      "  --worker-set K=V     failover: extra --set for the workers\n"
	      "                       (repeatable)\n"
	      "  --worker-log-dir D   failover: worker output to D/<id>.log\n"
	      "  --workers N          failover: workers to run (3)\n"
	      "  --kills K            failover: kill rounds (5)\n"
	      "  --session-timeout MS failover: the workers'\n"
	      "                       zookeeper.session_timeout_ms (4000)\n"
	      "  --pause S            failover: settled cluster -> kill (2)\n"
	      "  --sample-db S        steady: DB row counts every S s (the "
	      "soak)\n"
	      "  --window S           steady: lateness per S s of due time "
	      "(60)\n"
	      "  --alter-index        backlog: time dropping and re-adding\n"
	      "                       the retention index (migration 4)\n"
	      "  --flush              horizon: FLUSHDB, then time the "
	      "rebuild\n"
	      "  --label NAME         scenario name in the JSON line\n"
	      "  --tag TAG            id/topic tag (random)\n"
	      "  --quiet              no progress on stderr\n",
	      f);
}

enum {
	OPT_API = 256,
	OPT_BROKERS,
	OPT_PREFIX,
	OPT_TOPIC,
	OPT_DB,
	OPT_REDIS,
	OPT_WMETRICS,
	OPT_RATE,
	OPT_DURATION,
	OPT_COUNT,
	OPT_NEAR,
	OPT_CONNS,
	OPT_BATCH,
	OPT_SINGLE,
	OPT_BODY,
	OPT_LEAD,
	OPT_DELAY,
	OPT_SPREAD,
	OPT_GRACE,
	OPT_SETTLE,
	OPT_LINGER,
	OPT_ROWS,
	OPT_ZK,
	OPT_ZKROOT,
	OPT_LABEL,
	OPT_TAG,
	OPT_QUIET,
	OPT_SLOTS,
	OPT_PRELOAD,
	OPT_LEDGER,
	OPT_WBIN,
	OPT_WCONF,
	OPT_WSET,
	OPT_WLOG,
	OPT_WORKERS,
	OPT_KILLS,
	OPT_SESSION,
	OPT_PAUSE,
	OPT_SAMPLE,
	OPT_WINDOW,
	OPT_ALTER,
	OPT_FLUSH,
	OPT_CLIENTS,
	OPT_KAFKA_CONF,
	OPT_TOKEN_FILE,
};

static const struct option long_opts[] = {
	{"api", required_argument, NULL, OPT_API},
	{"brokers", required_argument, NULL, OPT_BROKERS},
	{"kafka-conf", required_argument, NULL, OPT_KAFKA_CONF},
	{"token-file", required_argument, NULL, OPT_TOKEN_FILE},
	{"topic-prefix", required_argument, NULL, OPT_PREFIX},
	{"topic", required_argument, NULL, OPT_TOPIC},
	{"db", required_argument, NULL, OPT_DB},
	{"redis", required_argument, NULL, OPT_REDIS},
	{"worker-metrics", required_argument, NULL, OPT_WMETRICS},
	{"rate", required_argument, NULL, OPT_RATE},
	{"duration", required_argument, NULL, OPT_DURATION},
	{"count", required_argument, NULL, OPT_COUNT},
	{"near-count", required_argument, NULL, OPT_NEAR},
	{"conns", required_argument, NULL, OPT_CONNS},
	{"batch", required_argument, NULL, OPT_BATCH},
	{"single", no_argument, NULL, OPT_SINGLE},
	{"body-size", required_argument, NULL, OPT_BODY},
	{"lead", required_argument, NULL, OPT_LEAD},
	{"delay-ms", required_argument, NULL, OPT_DELAY},
	{"spread-ms", required_argument, NULL, OPT_SPREAD},
	{"grace", required_argument, NULL, OPT_GRACE},
	{"settle", required_argument, NULL, OPT_SETTLE},
	{"linger", required_argument, NULL, OPT_LINGER},
	{"rows-per-stmt", required_argument, NULL, OPT_ROWS},
	{"zk", required_argument, NULL, OPT_ZK},
	{"zk-root", required_argument, NULL, OPT_ZKROOT},
	{"label", required_argument, NULL, OPT_LABEL},
	{"tag", required_argument, NULL, OPT_TAG},
	{"quiet", no_argument, NULL, OPT_QUIET},
	{"slots", required_argument, NULL, OPT_SLOTS},
	{"preload", no_argument, NULL, OPT_PRELOAD},
	{"ledger", required_argument, NULL, OPT_LEDGER},
	{"worker-bin", required_argument, NULL, OPT_WBIN},
	{"worker-conf", required_argument, NULL, OPT_WCONF},
	{"worker-set", required_argument, NULL, OPT_WSET},
	{"worker-log-dir", required_argument, NULL, OPT_WLOG},
	{"workers", required_argument, NULL, OPT_WORKERS},
	{"kills", required_argument, NULL, OPT_KILLS},
	{"session-timeout", required_argument, NULL, OPT_SESSION},
	{"pause", required_argument, NULL, OPT_PAUSE},
	{"sample-db", required_argument, NULL, OPT_SAMPLE},
	{"window", required_argument, NULL, OPT_WINDOW},
	{"alter-index", no_argument, NULL, OPT_ALTER},
	{"flush", no_argument, NULL, OPT_FLUSH},
	{"clients", required_argument, NULL, OPT_CLIENTS},
	{"help", no_argument, NULL, 'h'},
	{NULL, 0, NULL, 0},
};

static double
num_arg(const char *name, const char *s, double lo, double hi)
{
	char *end;
	double v;

	errno = 0;
	v = strtod(s, &end);
	if (errno || end == s || *end != '\0' || v < lo || v > hi) {
		fprintf(stderr,
			"prophet-bench: --%s: '%s' is not a number in "
			"[%g, %g]\n",
			name, s, lo, hi);
		exit(2);
	}
	return v;
}

static const struct {
	const char *name;
	int (*fn)(struct bench_opts *o);
} scenarios[] = {
	{"ingest", scen_ingest},       {"steady", scen_steady},
	{"burst", scen_burst},	       {"far", scen_far},
	{"kafka-raw", scen_kafka_raw}, {"db-raw", scen_db_raw},
	{"cleanup", scen_cleanup},     {"notifier", scen_notifier},
	{"failover", scen_failover},   {"storage", scen_storage},
	{"backlog", scen_backlog},     {"horizon", scen_horizon},
	{"pull", scen_pull},
};

int
main(int argc, char **argv)
{
	struct bench_opts o = {
		.api = "http://127.0.0.1:7070",
		.brokers = "127.0.0.1:9092",
		.topic_prefix = "",
		.rate = 1000,
		.duration = 0,
		.count = 0,
		.near_count = -1,
		.conns = 0,
		.batch = 0,
		.body_size = 100,
		.lead_ms = -1,
		.delay_ms = 600000,
		.spread_ms = 1000,
		.grace = 15,
		.settle = 1,
		.linger_ms = 2,
		.rows_per_stmt = 500,
		.slots = 16,
		.workers = 3,
		.kills = 5,
		.session_timeout_ms = 4000,
		.pause = 2,
	};
	struct sigaction sa;
	int c;

	if (argc < 2 || !strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	o.scenario = argv[1];
	optind = 2;
	while ((c = getopt_long(argc, argv, "h", long_opts, NULL)) != -1) {
		switch (c) {
		case OPT_API: o.api = optarg; break;
		case OPT_BROKERS: o.brokers = optarg; break;
		case OPT_KAFKA_CONF: kafka_conf_file_set(optarg); break;
		case OPT_TOKEN_FILE: {
			char err[512];
			char *t = secret_read_file(optarg, "a token", err,
						   sizeof(err));

			if (t == NULL) {
				fprintf(stderr, "prophet-bench: %s\n", err);
				return 2;
			}
			httpc_token_set(t);
			secret_free(t);
			break;
		}
		case OPT_PREFIX: o.topic_prefix = optarg; break;
		case OPT_TOPIC: o.topic = optarg; break;
		case OPT_DB: o.db = optarg; break;
		case OPT_REDIS: o.redis = optarg; break;
		case OPT_WMETRICS: o.worker_metrics = optarg; break;
		case OPT_RATE:
			o.rate = num_arg("rate", optarg, 1, 1e7);
			o.rate_set = 1;
			break;
		case OPT_DURATION:
			o.duration = num_arg("duration", optarg, 0.1, 1e6);
			break;
		case OPT_COUNT:
			o.count = (long)num_arg("count", optarg, 1, 1e9);
			break;
		case OPT_NEAR:
			o.near_count =
				(long)num_arg("near-count", optarg, 0, 1e9);
			break;
		case OPT_CONNS:
			o.conns = (int)num_arg("conns", optarg, 1, 4096);
			break;
		case OPT_BATCH:
			o.batch = (int)num_arg("batch", optarg, 1, 100000);
			break;
		case OPT_SINGLE: o.single = 1; break;
		case OPT_PRELOAD: o.preload = 1; break;
		case OPT_LEDGER: o.ledger_out = optarg; break;
		case OPT_BODY:
			o.body_size =
				(int)num_arg("body-size", optarg, 0, 1 << 24);
			break;
		case OPT_LEAD:
			o.lead_ms = (long)num_arg("lead", optarg, 0, 1e9);
			break;
		case OPT_DELAY:
			o.delay_ms = (long)num_arg("delay-ms", optarg, 0, 1e12);
			break;
		case OPT_SPREAD:
			o.spread_ms =
				(long)num_arg("spread-ms", optarg, 1, 1e9);
			break;
		case OPT_GRACE:
			o.grace = num_arg("grace", optarg, 0, 1e6);
			break;
		case OPT_SETTLE:
			o.settle = num_arg("settle", optarg, 0, 1e6);
			break;
		case OPT_LINGER:
			o.linger_ms = (int)num_arg("linger", optarg, 0, 1000);
			break;
		case OPT_ROWS:
			o.rows_per_stmt =
				(int)num_arg("rows-per-stmt", optarg, 1, 10000);
			break;
		case OPT_ZK: o.zk = optarg; break;
		case OPT_ZKROOT: o.zk_root = optarg; break;
		case OPT_LABEL: o.label = optarg; break;
		case OPT_TAG:
			snprintf(o.tag, sizeof(o.tag), "%s", optarg);
			break;
		case OPT_QUIET: o.quiet = 1; break;
		case OPT_SLOTS:
			o.slots = (int)num_arg("slots", optarg, 1, 1024);
			break;
		case OPT_WBIN: o.worker_bin = optarg; break;
		case OPT_WCONF: o.worker_conf = optarg; break;
		case OPT_WLOG: o.worker_log_dir = optarg; break;
		case OPT_WSET:
			if (o.nworker_sets == (int)(sizeof(o.worker_sets) /
						    sizeof(o.worker_sets[0]))) {
				fprintf(stderr, "prophet-bench: too many "
						"--worker-set\n");
				return 2;
			}
			o.worker_sets[o.nworker_sets++] = optarg;
			break;
		case OPT_WORKERS:
			o.workers = (int)num_arg("workers", optarg, 2, 16);
			break;
		case OPT_KILLS:
			o.kills = (int)num_arg("kills", optarg, 1, 1000);
			break;
		case OPT_SESSION:
			o.session_timeout_ms = (long)num_arg(
				"session-timeout", optarg, 2000, 120000);
			break;
		case OPT_PAUSE:
			o.pause = num_arg("pause", optarg, 0, 3600);
			break;
		case OPT_SAMPLE:
			o.sample_s = num_arg("sample-db", optarg, 1, 3600);
			break;
		case OPT_WINDOW:
			o.window_s = num_arg("window", optarg, 1, 3600);
			break;
		case OPT_ALTER: o.alter_index = 1; break;
		case OPT_FLUSH: o.flush = 1; break;
		case OPT_CLIENTS:
			o.clients = (int)num_arg("clients", optarg, 1, 1024);
			break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc) {
		fprintf(stderr, "prophet-bench: unexpected argument '%s'\n",
			argv[optind]);
		return 2;
	}
	if (o.tag[0] == '\0') {
		unsigned int seed = (unsigned int)(now_us() ^ getpid());

		snprintf(o.tag, sizeof(o.tag), "%08x",
			 rand_r(&seed) ^ (unsigned int)(now_us() & 0xffffff));
	}
	if (o.label == NULL)
		o.label = o.scenario;

	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_signal;
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);

	for (size_t i = 0; i < sizeof(scenarios) / sizeof(scenarios[0]); i++)
		if (!strcmp(o.scenario, scenarios[i].name))
			return finish(scenarios[i].fn(&o) == 0 ? 0 : 1);
	fprintf(stderr, "prophet-bench: unknown scenario '%s'\n", o.scenario);
	usage(stderr);
	return 2;
}
