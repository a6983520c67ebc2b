#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ini.h>

#include "cfg.h"
#include "kafka.h"
#include "log.h"
#include "netguard.h"
#include "url.h"
#include "xmalloc.h"

#define CFG_DEFAULT_PATH SYSCONFDIR "/prophet/prophet.conf"

struct cfg_def {
	const char *section;
	const char *key;
	enum cfg_type type;
	const char *def;
	int64_t min;
	int64_t max;
	int (*check)(const char *v, char *err, size_t errlen);
	int reload;
	const char *help;
};

static const struct cfg_def cfg_defs[CFG__COUNT] = {
#define CFG_DEF(id, sec, key, type, def, min, max, check, reload, help) \
	[CFG_##id] = {sec, key, type, def, min, max, check, reload, help},
	CFG_KEYS(CFG_DEF)
#undef CFG_DEF
};

/* Sections whose keys pass through verbatim to a library. */
static const char *const cfg_extra_sections[] = {
	"kafka.producer", "kafka.consumer", "notifier.routes"};

struct cfg_extra {
	char *section;
	char *key;
	char *value;
};

struct cfg {
	char *str[CFG__COUNT];
	int64_t num[CFG__COUNT];
	struct cfg_extra *extra;
	size_t n_extra;
	char *path;
};

static int
cfg_find(const char *section, const char *key)
{
	for (int i = 0; i < CFG__COUNT; i++)
		if (strcmp(cfg_defs[i].section, section) == 0 &&
		    strcmp(cfg_defs[i].key, key) == 0)
			return i;
	return -1;
}

static int
is_extra_section(const char *section)
{
	for (size_t i = 0;
	     i < sizeof(cfg_extra_sections) / sizeof(cfg_extra_sections[0]);
	     i++)
		if (strcmp(section, cfg_extra_sections[i]) == 0)
			return 1;
	return 0;
}

static int
parse_int(const char *v, int64_t *out)
{
	char *end;
	long long n;

	while (isspace((unsigned char)*v))
		v++;
	if (*v == '\0')
		return -1;
	errno = 0;
	n = strtoll(v, &end, 10);
	if (errno != 0 || end == v)
		return -1;
	while (isspace((unsigned char)*end))
		end++;
	if (*end != '\0')
		return -1;
	*out = n;
	return 0;
}

static int
parse_bool(const char *v, int64_t *out)
{
	if (!strcasecmp(v, "true") || !strcasecmp(v, "yes") ||
	    !strcasecmp(v, "on") || !strcmp(v, "1")) {
		*out = 1;
		return 0;
	}
	if (!strcasecmp(v, "false") || !strcasecmp(v, "no") ||
	    !strcasecmp(v, "off") || !strcmp(v, "0")) {
		*out = 0;
		return 0;
	}
	return -1;
}

static int
cfg_set_id(struct cfg *cfg, int id, const char *value, char *err, size_t errlen)
{
	const struct cfg_def *d = &cfg_defs[id];
	char why[256] = "";
	int64_t n = 0;

	switch (d->type) {
	case CFG_INT:
		if (parse_int(value, &n) < 0) {
			snprintf(err, errlen, "%s.%s: '%s' is not an integer",
				 d->section, d->key, value);
			return -1;
		}
		if (n < d->min || n > d->max) {
			snprintf(err, errlen,
				 "%s.%s: %" PRId64 " is out of range [%" PRId64
				 ", %" PRId64 "]",
				 d->section, d->key, n, d->min, d->max);
			return -1;
		}
		break;
	case CFG_BOOL:
		if (parse_bool(value, &n) < 0) {
			snprintf(err, errlen,
				 "%s.%s: '%s' is not a boolean (true/false)",
				 d->section, d->key, value);
			return -1;
		}
		break;
	case CFG_STR:
		if (d->check != NULL && d->check(value, why, sizeof(why)) < 0) {
			snprintf(err, errlen, "%s.%s: %s", d->section, d->key,
				 why);
			return -1;
		}
		break;
	}
	xfree(cfg->str[id]);
	cfg->str[id] = xstrdup(value);
	cfg->num[id] = n;
	return 0;
}

struct cfg *
cfg_create(void)
{
	struct cfg *cfg = xcalloc(1, sizeof(*cfg));
	char err[256];

	for (int i = 0; i < CFG__COUNT; i++)
		if (cfg_set_id(cfg, i, cfg_defs[i].def, err, sizeof(err)) < 0)
			log_fatal("bad built-in default", "error=\"%s\"", err);
	return cfg;
}

void
cfg_destroy(struct cfg *cfg)
{
	if (cfg == NULL)
		return;
	for (int i = 0; i < CFG__COUNT; i++)
		xfree(cfg->str[i]);
	for (size_t i = 0; i < cfg->n_extra; i++) {
		xfree(cfg->extra[i].section);
		xfree(cfg->extra[i].key);
		xfree(cfg->extra[i].value);
	}
	xfree(cfg->extra);
	xfree(cfg->path);
	xfree(cfg);
}

int
cfg_set(struct cfg *cfg, const char *section, const char *key,
	const char *value, char *err, size_t errlen)
{
	int id;

	if (is_extra_section(section)) {
		for (size_t i = 0; i < cfg->n_extra; i++) {
			struct cfg_extra *e = &cfg->extra[i];

			if (!strcmp(e->section, section) &&
			    !strcmp(e->key, key)) {
				xfree(e->value);
				e->value = xstrdup(value);
				return 0;
			}
		}
		cfg->extra = xrealloc(cfg->extra,
				      (cfg->n_extra + 1) * sizeof(*cfg->extra));
		cfg->extra[cfg->n_extra].section = xstrdup(section);
		cfg->extra[cfg->n_extra].key = xstrdup(key);
		cfg->extra[cfg->n_extra].value = xstrdup(value);
		cfg->n_extra++;
		return 0;
	}
	id = cfg_find(section, key);
	if (id < 0) {
		snprintf(err, errlen, "unknown key '%s.%s'", section, key);
		return -1;
	}
	return cfg_set_id(cfg, id, value, err, errlen);
}

int
cfg_set_arg(struct cfg *cfg, const char *arg, char *err, size_t errlen)
{
	const char *eq = strchr(arg, '=');
	const char *dot;
	char section[64], key[128];
	size_t slen;

	if (eq == NULL) {
		snprintf(err, errlen, "--set '%s': expected section.key=value",
			 arg);
		return -1;
	}
	dot = NULL;
	for (size_t i = 0;
	     i < sizeof(cfg_extra_sections) / sizeof(cfg_extra_sections[0]);
	     i++) {
		size_t n = strlen(cfg_extra_sections[i]);

		if (!strncmp(arg, cfg_extra_sections[i], n) && arg[n] == '.')
			dot = arg + n;
	}
	if (dot == NULL)
		dot = memchr(arg, '.', (size_t)(eq - arg));
	if (dot == NULL || dot == arg || dot + 1 >= eq) {
		snprintf(err, errlen, "--set '%s': expected section.key=value",
			 arg);
		return -1;
	}
	slen = (size_t)(dot - arg);
	if (slen >= sizeof(section) || (size_t)(eq - dot - 1) >= sizeof(key)) {
		snprintf(err, errlen, "--set '%s': name too long", arg);
		return -1;
	}
	memcpy(section, arg, slen);
	section[slen] = '\0';
	memcpy(key, dot + 1, (size_t)(eq - dot - 1));
	key[eq - dot - 1] = '\0';
	return cfg_set(cfg, section, key, eq + 1, err, errlen);
}

struct ini_ctx {
	struct cfg *cfg;
	char *err;
	size_t errlen;
	int failed;
	FILE *fp;
	int lines;   /* newline-terminated lines read so far */
	int partial; /* the last read had no newline */
	int fail_line;
};

/* Counts lines so a value error can be told apart from an earlier
 * syntax error: ini_parse reports only the first error's line. */
static char *
cfg_ini_reader(char *str, int num, void *stream)
{
	struct ini_ctx *ctx = stream;
	char *s = fgets(str, num, ctx->fp);

	if (s != NULL) {
		ctx->partial = strchr(s, '\n') == NULL;
		if (!ctx->partial)
			ctx->lines++;
	}
	return s;
}

static int
cfg_ini_cb(void *user, const char *section, const char *name, const char *value)
{
	struct ini_ctx *ctx = user;
	char why[512];

	if (ctx->failed)
		return 0;
	if (cfg_set(ctx->cfg, section, name, value, why, sizeof(why)) < 0) {
		snprintf(ctx->err, ctx->errlen, "%s", why);
		ctx->failed = 1;
		ctx->fail_line = ctx->lines + ctx->partial;
		return 0;
	}
	return 1;
}

int
cfg_load_file(struct cfg *cfg, const char *path, char *err, size_t errlen)
{
	struct ini_ctx ctx = {cfg, err, errlen, 0, NULL, 0, 0, 0};
	char why[512] = "";
	int r;

	ctx.err = why;
	ctx.errlen = sizeof(why);
	ctx.fp = fopen(path, "r");
	if (ctx.fp == NULL)
		r = -1;
	else
		r = ini_parse_stream(cfg_ini_reader, &ctx, cfg_ini_cb, &ctx);
	if (ctx.fp != NULL)
		fclose(ctx.fp);
	if (r == -1) {
		snprintf(err, errlen, "%s: cannot open: %s", path,
			 strerror(errno));
		return -1;
	}
	if (r != 0) {
		if (ctx.failed && ctx.fail_line == r)
			snprintf(err, errlen, "%s:%d: %s", path, r, why);
		else
			snprintf(err, errlen, "%s:%d: syntax error", path, r);
		return -1;
	}
	xfree(cfg->path);
	cfg->path = xstrdup(path);
	return 0;
}

const char *
cfg_str(const struct cfg *cfg, enum cfg_id id)
{
	return cfg->str[id];
}

int64_t
cfg_int(const struct cfg *cfg, enum cfg_id id)
{
	return cfg->num[id];
}

const char *
cfg_path(const struct cfg *cfg)
{
	return cfg->path ? cfg->path : "(defaults)";
}

size_t
cfg_extra_count(const struct cfg *cfg, const char *section)
{
	size_t n = 0;

	for (size_t i = 0; i < cfg->n_extra; i++)
		if (!strcmp(cfg->extra[i].section, section))
			n++;
	return n;
}

void
cfg_extra_get(const struct cfg *cfg, const char *section, size_t i,
	      const char **key, const char **value)
{
	for (size_t j = 0; j < cfg->n_extra; j++) {
		if (strcmp(cfg->extra[j].section, section))
			continue;
		if (i-- == 0) {
			*key = cfg->extra[j].key;
			*value = cfg->extra[j].value;
			return;
		}
	}
	*key = *value = NULL;
}

int
cfg_reload(struct cfg *cfg, char *err, size_t errlen)
{
	struct cfg *fresh;
	char why[512];

	if (cfg->path == NULL) {
		snprintf(err, errlen, "no configuration file to reload");
		return -1;
	}
	fresh = cfg_create();
	if (cfg_load_file(fresh, cfg->path, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%s", why);
		cfg_destroy(fresh);
		return -1;
	}
	for (int i = 0; i < CFG__COUNT; i++) {
		if (!cfg_defs[i].reload || !strcmp(cfg->str[i], fresh->str[i]))
			continue;
		log_info("config reloaded", "key=%s.%s value=\"%s\"",
			 cfg_defs[i].section, cfg_defs[i].key, fresh->str[i]);
		xfree(cfg->str[i]);
		cfg->str[i] = xstrdup(fresh->str[i]);
		cfg->num[i] = fresh->num[i];
	}
	cfg_destroy(fresh);
	return 0;
}

static void
write_wrapped(FILE *fp, const char *help)
{
	fprintf(fp, "; %s\n", help);
}

void
cfg_write_example(FILE *fp)
{
	const char *section = "";

	fprintf(fp, "; Prophet configuration: every key, its default and "
		    "meaning.\n"
		    "; Generated by `prophet-manager --print-example-config`; "
		    "`make check` verifies\n"
		    "; that deploy/prophet.conf.example matches it.\n"
		    "; Keys marked (reload) are re-read on SIGHUP; the others "
		    "need a restart.\n");
	for (int i = 0; i < CFG__COUNT; i++) {
		const struct cfg_def *d = &cfg_defs[i];

		if (strcmp(section, d->section)) {
			section = d->section;
			fprintf(fp, "\n[%s]\n", section);
		}
		if (d->type == CFG_INT)
			fprintf(fp,
				"; %s (integer %" PRId64 "..%" PRId64 "%s)\n",
				d->help, d->min, d->max,
				d->reload ? ", reload" : "");
		else if (d->reload)
			fprintf(fp, "; %s (reload)\n", d->help);
		else
			write_wrapped(fp, d->help);
		fprintf(fp, "%s = %s\n", d->key, d->def);
	}
	fprintf(fp, "\n[kafka.producer]\n"
		    "; any librdkafka producer property, passed through "
		    "verbatim, e.g.\n"
		    "; compression.type = lz4\n");
	fprintf(fp, "\n[notifier.routes]\n"
		    "; <task topic> = <URL>: tasks of that topic without a "
		    "callback of their\n"
		    "; own are POSTed there by the notifier, e.g.\n"
		    "; orders = https://orders.internal/prophet\n");
}

int
cfg_check_zk_path(const char *v, char *err, size_t errlen)
{
	size_t n = strlen(v);

	if (n < 2 || v[0] != '/' || v[n - 1] == '/' || strstr(v, "//")) {
		snprintf(
			err, errlen,
			"'%s' must be an absolute ZooKeeper path like /prophet",
			v);
		return -1;
	}
	return 0;
}

int
cfg_check_nonempty(const char *v, char *err, size_t errlen)
{
	if (*v == '\0') {
		snprintf(err, errlen, "must not be empty");
		return -1;
	}
	return 0;
}

static int
check_url(const char *v, const char *scheme, char *err, size_t errlen)
{
	struct url u;
	char why[200];

	if (url_parse(v, &u, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%s", why);
		return -1;
	}
	if (strcmp(u.scheme, scheme)) {
		snprintf(err, errlen, "scheme must be %s://", scheme);
		url_clear(&u);
		return -1;
	}
	url_clear(&u);
	return 0;
}

int
cfg_check_redis_url(const char *v, char *err, size_t errlen)
{
	struct url u;

	if (check_url(v, "redis", err, errlen) < 0)
		return -1;
	url_parse(v, &u, err, errlen);
	if (u.path != NULL) {
		int64_t db;

		if (parse_int(u.path, &db) < 0 || db < 0 || db > 1000) {
			snprintf(err, errlen, "database '%s' is not a number",
				 u.path);
			url_clear(&u);
			return -1;
		}
	}
	url_clear(&u);
	return 0;
}

int
cfg_check_db_url(const char *v, char *err, size_t errlen)
{
	struct url u;

	if (check_url(v, "mysql", err, errlen) < 0)
		return -1;
	url_parse(v, &u, err, errlen);
	if (u.path == NULL || u.user == NULL) {
		snprintf(err, errlen,
			 "expected mysql://user:password@host:port/database");
		url_clear(&u);
		return -1;
	}
	url_clear(&u);
	return 0;
}

int
cfg_check_topic_prefix(const char *v, char *err, size_t errlen)
{
	for (const char *p = v; *p; p++) {
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' &&
		    *p != '-') {
			snprintf(err, errlen,
				 "'%s' may only hold [A-Za-z0-9._-]", v);
			return -1;
		}
	}
	if (strlen(v) > 120) {
		snprintf(err, errlen, "longer than 120 characters");
		return -1;
	}
	return 0;
}

int
cfg_check_listen(const char *v, char *err, size_t errlen)
{
	char host[256];
	int port;

	if (hostport_parse(v, host, sizeof(host), &port) < 0) {
		snprintf(err, errlen, "'%s' is not host:port", v);
		return -1;
	}
	return 0;
}

int
cfg_check_worker_id(const char *v, char *err, size_t errlen)
{
	size_t n = strlen(v);

	for (const char *p = v; *p; p++) {
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' &&
		    *p != '-') {
			snprintf(err, errlen,
				 "'%s' may only hold [A-Za-z0-9._-]", v);
			return -1;
		}
	}
	if (n > 100) {
		snprintf(err, errlen, "longer than 100 characters");
		return -1;
	}
	return 0;
}

int
cfg_check_level(const char *v, char *err, size_t errlen)
{
	enum log_level l;

	if (log_level_parse(v, &l) < 0 || l == PLOG_FATAL) {
		snprintf(err, errlen, "'%s' is not debug, info, warn or error",
			 v);
		return -1;
	}
	return 0;
}

int
cfg_check_topic(const char *v, char *err, size_t errlen)
{
	size_t n = strlen(v);

	if (n == 0 || n > 200 || !strcmp(v, ".") || !strcmp(v, "..")) {
		snprintf(err, errlen,
			 "a topic is 1-200 characters, not . or ..");
		return -1;
	}
	for (const char *p = v; *p; p++) {
		if (!isalnum((unsigned char)*p) && *p != '.' && *p != '_' &&
		    *p != '-') {
			snprintf(err, errlen,
				 "'%s' may only hold [A-Za-z0-9._-]", v);
			return -1;
		}
	}
	return 0;
}

int
cfg_check_cidr_list(const char *v, char *err, size_t errlen)
{
	struct netguard *g = netguard_create(v, err, errlen);

	if (g == NULL)
		return -1;
	netguard_destroy(g);
	return 0;
}

/* A listener's certificate comes with its key, a client CA with both. */
static int
check_tls(const struct cfg *cfg, enum cfg_id cert, enum cfg_id key,
	  enum cfg_id ca, char *err, size_t errlen)
{
	int c = cfg->str[cert][0] != '\0', k = cfg->str[key][0] != '\0';
	enum cfg_id missing = !c ? cert : key;

	if (c == k && (c || cfg->str[ca][0] == '\0'))
		return 0;
	snprintf(err, errlen, "%s.%s: needed with %s.%s",
		 cfg_defs[missing].section, cfg_defs[missing].key,
		 cfg_defs[c == k ? ca
			  : c	 ? cert
				 : key]
			 .section,
		 cfg_defs[c == k ? ca
			  : c	 ? cert
				 : key]
			 .key);
	return -1;
}

int
cfg_validate(const struct cfg *cfg, char *err, size_t errlen)
{
	static const enum cfg_id topics[] = {CFG_NOTIFIER_RETRY_TOPIC,
					     CFG_NOTIFIER_DEAD_LETTER_TOPIC};
	size_t plen = strlen(cfg->str[CFG_KAFKA_TOPIC_PREFIX]);

	if (cfg->num[CFG_NOTIFIER_MAX_TIMEOUT_MS] <
	    cfg->num[CFG_NOTIFIER_TIMEOUT_MS]) {
		snprintf(err, errlen,
			 "notifier.max_timeout_ms: %" PRId64
			 " is below notifier.timeout_ms (%" PRId64 ")",
			 cfg->num[CFG_NOTIFIER_MAX_TIMEOUT_MS],
			 cfg->num[CFG_NOTIFIER_TIMEOUT_MS]);
		return -1;
	}
	for (size_t i = 0; i < sizeof(topics) / sizeof(topics[0]); i++) {
		const struct cfg_def *d = &cfg_defs[topics[i]];
		size_t n = plen + strlen(cfg->str[topics[i]]);

		if (n > KAFKA_TOPIC_NAME_MAX) {
			snprintf(err, errlen,
				 "%s.%s: with kafka.topic_prefix it is a Kafka "
				 "topic of %zu characters; Kafka allows %d",
				 d->section, d->key, n, KAFKA_TOPIC_NAME_MAX);
			return -1;
		}
	}
	if (check_tls(cfg, CFG_HTTP_TLS_CERT, CFG_HTTP_TLS_KEY,
		      CFG_HTTP_TLS_CLIENT_CA, err, errlen) < 0 ||
	    check_tls(cfg, CFG_WORKER_HTTP_TLS_CERT, CFG_WORKER_HTTP_TLS_KEY,
		      CFG_WORKER_HTTP_TLS_CLIENT_CA, err, errlen) < 0 ||
	    check_tls(cfg, CFG_NOTIFIER_HTTP_TLS_CERT,
		      CFG_NOTIFIER_HTTP_TLS_KEY,
		      CFG_NOTIFIER_HTTP_TLS_CLIENT_CA, err, errlen) < 0)
		return -1;
	if (!strcmp(cfg->str[CFG_NOTIFIER_RETRY_TOPIC],
		    cfg->str[CFG_NOTIFIER_DEAD_LETTER_TOPIC])) {
		snprintf(err, errlen,
			 "notifier.dead_letter_topic: the same topic as "
			 "notifier.retry_topic");
		return -1;
	}
	return 0;
}

static void
usage(const char *prog, const char *summary)
{
	printf("usage: %s [options]\n"
	       "%s\n\n"
	       "  -c, --config FILE        configuration file (default %s)\n"
	       "      --set SECTION.KEY=VALUE\n"
	       "                           override a key (repeatable)\n"
	       "      --check-config       validate the configuration and "
	       "exit\n"
	       "      --print-example-config\n"
	       "                           print every key with its default\n"
	       "  -V, --version            print the version and exit\n"
	       "  -h, --help               print this help and exit\n",
	       prog, summary, CFG_DEFAULT_PATH);
}

struct cfg *
cfg_from_args(int *argcp, char **argv, const char *prog, const char *summary)
{
	const char *path = NULL;
	char **sets = xcalloc((size_t)*argcp + 1, sizeof(*sets));
	size_t nsets = 0;
	int check = 0, out = 1;
	struct cfg *cfg;
	char err[1024];

	for (int i = 1; i < *argcp; i++) {
		const char *a = argv[i];

		if (!strcmp(a, "-c") || !strcmp(a, "--config")) {
			if (++i >= *argcp)
				log_fatal("missing argument", "option=%s", a);
			path = argv[i];
		} else if (!strncmp(a, "--config=", 9)) {
			path = a + 9;
		} else if (!strcmp(a, "--set")) {
			if (++i >= *argcp)
				log_fatal("missing argument", "option=--set");
			sets[nsets++] = argv[i];
		} else if (!strncmp(a, "--set=", 6)) {
			sets[nsets++] = (char *)a + 6;
		} else if (!strcmp(a, "--check-config")) {
			check = 1;
		} else if (!strcmp(a, "--print-example-config")) {
			cfg_write_example(stdout);
			exit(0);
		} else if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
			printf("%s %s\n", prog, PACKAGE_VERSION);
			exit(0);
		} else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
			usage(prog, summary);
			exit(0);
		} else {
			argv[out++] = argv[i];
		}
	}
	argv[out] = NULL;
	*argcp = out;

	cfg = cfg_create();
	if (path != NULL) {
		if (cfg_load_file(cfg, path, err, sizeof(err)) < 0) {
			fprintf(stderr, "%s: config: %s\n", prog, err);
			exit(1);
		}
	} else if (access(CFG_DEFAULT_PATH, R_OK) == 0) {
		if (cfg_load_file(cfg, CFG_DEFAULT_PATH, err, sizeof(err)) <
		    0) {
			fprintf(stderr, "%s: config: %s\n", prog, err);
			exit(1);
		}
	}
	for (size_t i = 0; i < nsets; i++) {
		if (cfg_set_arg(cfg, sets[i], err, sizeof(err)) < 0) {
			fprintf(stderr, "%s: config: %s\n", prog, err);
			exit(1);
		}
	}
	xfree(sets);
	if (cfg_validate(cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: config: %s\n", prog, err);
		exit(1);
	}
	if (check) {
		printf("%s: configuration %s is valid\n", prog, cfg_path(cfg));
		cfg_destroy(cfg);
		exit(0);
	}
	return cfg;
}
