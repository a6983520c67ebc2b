#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <ini.h>

#include "auth.h"
#include "cfg.h"
#include "commit.h"
#include "http.h"
#include "kafka.h"
#include "log.h"
#include "netguard.h"
#include "secret.h"
#include "whsign.h"
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
	"kafka.client", "kafka.producer", "kafka.consumer", "notifier.routes"};

/* What [section@program] may name. */
static const char *const cfg_programs[] = {"manager", "worker", "notifier",
					   "prophetctl"};

/* The *_file keys holding secrets, and the programs that read them
 * (--check-config reads them there). */
static const struct {
	enum cfg_id id;
	const char *what;
	const char *programs;
} cfg_secret_files[] = {
	{CFG_ZK_AUTH_FILE, "ZooKeeper credentials",
	 ",manager,worker,notifier,"},
	{CFG_REDIS_PASSWORD_FILE, "a password", ",manager,worker,"},
	{CFG_DB_PASSWORD_FILE, "a password", ",manager,worker,notifier,"},
	{CFG_KAFKA_SASL_PASSWORD_FILE, "a password",
	 ",manager,worker,notifier,"},
	{CFG_HTTP_TOKEN_FILE, "a token", ",notifier,prophetctl,"},
	{CFG_NOTIFIER_CALLBACK_SIGNING_KEY_FILE, "callback signing keys",
	 ",notifier,"},
};

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
	char **sets; /* --set arguments: applied again after a reload */
	size_t n_sets;
	char *path;
	char *prog; /* whose [section@program] keys apply; NULL: nobody's */
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

/* A duration: a whole number with a unit (ms, s, m, h, d); a bare number
 * is milliseconds, like every *_ms key. */
static int
parse_duration(const char *v, int64_t *out)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {{"ms", 1},	     {"s", 1000},     {"m", 60000},
		     {"h", 3600000}, {"d", 86400000}, {"", 1}};
	char *end;
	long long n;

	while (isspace((unsigned char)*v))
		v++;
	if (!isdigit((unsigned char)*v))
		return -1;
	errno = 0;
	n = strtoll(v, &end, 10);
	if (errno != 0)
		return -1;
	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++) {
		size_t ul = strlen(units[i].unit);
		const char *rest = end + ul;

		if (strncmp(end, units[i].unit, ul) != 0)
			continue;
		while (isspace((unsigned char)*rest))
			rest++;
		if (*rest != '\0')
			continue;
		if (n > INT64_MAX / units[i].ms)
			return -1;
		*out = n * units[i].ms;
		return 0;
	}
	return -1;
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
	case CFG_DURATION:
		if (parse_duration(value, &n) < 0) {
			snprintf(err, errlen,
				 "%s.%s: '%s' is not a duration (a whole "
				 "number with ms, s, m, h or d; bare: ms)",
				 d->section, d->key, value);
			return -1;
		}
		if (n < d->min || n > d->max) {
			snprintf(err, errlen,
				 "%s.%s: '%s' is out of range [%" PRId64
				 " ms, %" PRId64 " ms]",
				 d->section, d->key, value, d->min, d->max);
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
	for (size_t i = 0; i < cfg->n_sets; i++)
		xfree(cfg->sets[i]);
	xfree(cfg->sets);
	xfree(cfg->path);
	xfree(cfg->prog);
	xfree(cfg);
}

void
cfg_set_program(struct cfg *cfg, const char *prog)
{
	xfree(cfg->prog);
	cfg->prog = prog ? xstrdup(prog) : NULL;
}

/*
 * "db@worker": 1 with the section ("db") in base and the program in
 * *prog; 0 without '@'; -1 for a program that does not exist.
 */
static int
split_program(const char *section, char *base, size_t blen, const char **prog,
	      char *err, size_t errlen)
{
	const char *at = strchr(section, '@');

	if (at == NULL)
		return 0;
	for (size_t i = 0; i < sizeof(cfg_programs) / sizeof(cfg_programs[0]);
	     i++) {
		if (strcmp(at + 1, cfg_programs[i]))
			continue;
		if ((size_t)(at - section) >= blen || at == section)
			break;
		memcpy(base, section, (size_t)(at - section));
		base[at - section] = '\0';
		*prog = cfg_programs[i];
		return 1;
	}
	snprintf(err, errlen,
		 "[%.64s]: a section for one program is [section@program], "
		 "program one of manager, worker, notifier, prophetctl",
		 section);
	return -1;
}

int
cfg_set(struct cfg *cfg, const char *section, const char *key,
	const char *value, char *err, size_t errlen)
{
	const char *prog;
	char base[64];
	int id, r;

	r = split_program(section, base, sizeof(base), &prog, err, errlen);
	if (r < 0)
		return -1;
	if (r > 0) {
		/* Another program's key is checked all the same: one
		 * --check-config finds the mistakes of every section. */
		struct cfg *c = cfg->prog && !strcmp(cfg->prog, prog)
					? cfg
					: cfg_create();
		char why[512];

		r = cfg_set(c, base, key, value, why, sizeof(why));
		if (c != cfg)
			cfg_destroy(c);
		if (r < 0)
			snprintf(err, errlen, "[%s] %s", section, why);
		return r;
	}
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
		snprintf(err, errlen, "--set '%.*s=...': name too long",
			 (int)(eq - arg > 200 ? 200 : eq - arg), arg);
		return -1;
	}
	memcpy(section, arg, slen);
	section[slen] = '\0';
	memcpy(key, dot + 1, (size_t)(eq - dot - 1));
	key[eq - dot - 1] = '\0';
	if (cfg_set(cfg, section, key, eq + 1, err, errlen) < 0)
		return -1;
	cfg->sets = xrealloc(cfg->sets, (cfg->n_sets + 1) * sizeof(char *));
	cfg->sets[cfg->n_sets++] = xstrdup(arg);
	return 0;
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
	/* This program's [section@program] keys, applied after the file
	 * so that they win wherever they stand. */
	struct cfg_extra *later;
	size_t n_later;
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

	struct cfg *c = ctx->cfg;
	const char *prog = NULL;
	char base[64];
	int r;

	if (ctx->failed)
		return 0;
	r = split_program(section, base, sizeof(base), &prog, why, sizeof(why));
	if (r > 0 && c->prog != NULL && !strcmp(c->prog, prog)) {
		/* checked now (the error has its line), applied later */
		struct cfg *scratch = cfg_create();

		r = cfg_set(scratch, base, name, value, why, sizeof(why));
		cfg_destroy(scratch);
		if (r == 0) {
			ctx->later = xrealloc(ctx->later,
					      (ctx->n_later + 1) *
						      sizeof(*ctx->later));
			ctx->later[ctx->n_later].section = xstrdup(base);
			ctx->later[ctx->n_later].key = xstrdup(name);
			ctx->later[ctx->n_later].value = xstrdup(value);
			ctx->n_later++;
			return 1;
		}
		snprintf(why + strlen(why), sizeof(why) - strlen(why),
			 " (in [%s])", section);
	} else if (r >= 0) {
		r = cfg_set(c, section, name, value, why, sizeof(why));
	}
	if (r < 0) {
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
	struct ini_ctx ctx = {cfg, err, errlen, 0, NULL, 0, 0, 0, NULL, 0};
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
	for (size_t i = 0; i < ctx.n_later; i++) {
		struct cfg_extra *e = &ctx.later[i];

		if (r == 0 && cfg_set(cfg, e->section, e->key, e->value, why,
				      sizeof(why)) < 0)
			log_fatal("config key checked but not applied",
				  "error=\"%s\"", why);
		xfree(e->section);
		xfree(e->key);
		xfree(e->value);
	}
	xfree(ctx.later);
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

char *
cfg_secret(const struct cfg *cfg, enum cfg_id file_id, char *err, size_t errlen)
{
	const struct cfg_def *d = &cfg_defs[file_id];
	const char *what = "a secret";
	char why[512];
	char *s;

	err[0] = '\0';
	if (cfg->str[file_id][0] == '\0')
		return NULL;
	for (size_t i = 0;
	     i < sizeof(cfg_secret_files) / sizeof(cfg_secret_files[0]); i++)
		if (cfg_secret_files[i].id == file_id)
			what = cfg_secret_files[i].what;
	s = secret_read_file(cfg->str[file_id], what, why, sizeof(why));
	if (s == NULL)
		snprintf(err, errlen, "%s.%s: %s", d->section, d->key, why);
	return s;
}

/* What a manager's tokens file takes (common/auth.c): 16-256 visible
 * ASCII characters, so a token that could never be accepted (a space, a
 * quote pasted along) is refused at start, not by a 401 at every call. */
#define HTTP_TOKEN_MIN 16
#define HTTP_TOKEN_MAX 256

char *
cfg_http_token(const struct cfg *cfg, char *err, size_t errlen)
{
	int from_file = cfg->str[CFG_HTTP_TOKEN_FILE][0] != '\0';
	char *t = from_file ? cfg_secret(cfg, CFG_HTTP_TOKEN_FILE, err, errlen)
			    : xstrdup(cfg->str[CFG_HTTP_TOKEN]);
	size_t n, bad = 0;

	if (t == NULL)
		return NULL;
	err[0] = '\0';
	n = strlen(t);
	for (size_t i = 0; i < n && !bad; i++)
		if ((unsigned char)t[i] <= 0x20 || (unsigned char)t[i] >= 0x7f)
			bad = i + 1;
	if (n > 0 && (bad || n < HTTP_TOKEN_MIN || n > HTTP_TOKEN_MAX)) {
		if (bad)
			snprintf(err, errlen,
				 "%s: the token has a space, a control or a "
				 "non-ASCII character (at character %zu); a "
				 "manager accepts 16-256 visible ASCII "
				 "characters",
				 from_file ? "http.token_file" : "http.token",
				 bad);
		else
			snprintf(err, errlen,
				 "%s: the token has %zu characters; a manager "
				 "accepts 16-256",
				 from_file ? "http.token_file" : "http.token",
				 n);
		secret_free(t);
		return NULL;
	}
	return t;
}

int
cfg_signing_keys(const struct cfg *cfg, struct whsign *ks, char *err,
		 size_t errlen)
{
	struct whsign tmp;
	char why[256];
	char *s;
	int rc;

	if (cfg->str[CFG_NOTIFIER_CALLBACK_SIGNING_KEY_FILE][0] == '\0') {
		err[0] = '\0';
		return 0;
	}
	s = cfg_secret(cfg, CFG_NOTIFIER_CALLBACK_SIGNING_KEY_FILE, err,
		       errlen);
	if (s == NULL)
		return -1;
	rc = whsign_parse(&tmp, s, why, sizeof(why));
	secret_free(s);
	if (rc < 0) {
		snprintf(err, errlen, "notifier.callback_signing_key_file: %s",
			 why);
		return -1;
	}
	if (ks != NULL)
		*ks = tmp;
	whsign_wipe(&tmp);
	return (int)(ks != NULL ? ks->n : 1);
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
	cfg_set_program(fresh, cfg->prog);
	if (cfg_load_file(fresh, cfg->path, why, sizeof(why)) < 0) {
		snprintf(err, errlen, "%s", why);
		cfg_destroy(fresh);
		return -1;
	}
	/* The command line outranks the file, as at start. */
	for (size_t i = 0; i < cfg->n_sets; i++) {
		if (cfg_set_arg(fresh, cfg->sets[i], why, sizeof(why)) < 0) {
			snprintf(err, errlen, "%s", why);
			cfg_destroy(fresh);
			return -1;
		}
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

/* A duration in the largest unit that divides it: 86400000 -> "1d". */
static void
fmt_duration(char *buf, size_t len, int64_t ms)
{
	static const struct {
		const char *unit;
		int64_t ms;
	} units[] = {
		{"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}};

	for (size_t i = 0; i < sizeof(units) / sizeof(units[0]); i++)
		if (ms != 0 && ms % units[i].ms == 0) {
			snprintf(buf, len, "%" PRId64 "%s", ms / units[i].ms,
				 units[i].unit);
			return;
		}
	snprintf(buf, len, "%" PRId64 "ms", ms);
}

/* "; " lines of at most 78 columns (inih reads lines of 200 at most). */
static void
write_wrapped(FILE *fp, const char *help)
{
	const char *p = help;

	while (*p != '\0') {
		size_t n = strlen(p), cut = n;

		if (n > 76) {
			cut = 76;
			while (cut > 0 && p[cut] != ' ')
				cut--;
			if (cut == 0)
				cut = strcspn(p, " ");
		}
		fprintf(fp, "; %.*s\n", (int)cut, p);
		p += cut;
		while (*p == ' ')
			p++;
	}
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
		if (d->type == CFG_INT) {
			char *h = xasprintf("%s (integer %" PRId64 "..%" PRId64
					    "%s)",
					    d->help, d->min, d->max,
					    d->reload ? ", reload" : "");

			write_wrapped(fp, h);
			xfree(h);
		} else if (d->type == CFG_DURATION) {
			char lo[32], hi[32], *h;

			fmt_duration(lo, sizeof(lo), d->min);
			fmt_duration(hi, sizeof(hi), d->max);
			h = xasprintf("%s (duration %s..%s%s)", d->help, lo, hi,
				      d->reload ? ", reload" : "");
			write_wrapped(fp, h);
			xfree(h);
		} else if (d->reload) {
			char *h = xasprintf("%s (reload)", d->help);

			write_wrapped(fp, h);
			xfree(h);
		} else {
			write_wrapped(fp, d->help);
		}
		fprintf(fp, "%s = %s\n", d->key, d->def);
	}
	fprintf(fp,
		"\n[kafka.client]\n"
		"; any librdkafka property, passed through verbatim to every "
		"producer and\n"
		"; consumer; [kafka.producer] and [kafka.consumer] to one kind "
		"only. What\n"
		"; Prophet sets itself is refused with the key's name: its "
		"safety settings\n"
		"; (enable.idempotence, acks, message.timeout.ms, "
		"enable.auto.commit, ...)\n"
		"; and what a key above sets (bootstrap.servers, "
		"security.protocol, sasl.*,\n"
		"; ssl.ca.location, linger.ms, ...). E.g.\n"
		"; client.rack = eu-west-1a\n"
		"\n[kafka.producer]\n"
		"; e.g. compression.type = lz4\n"
		"\n[kafka.consumer]\n"
		"; e.g. session.timeout.ms = 10000\n");
	fprintf(fp, "\n[notifier.routes]\n"
		    "; <task topic> = <URL>: tasks of that topic without a "
		    "callback of their\n"
		    "; own are POSTed there by the notifier, e.g.\n"
		    "; orders = https://orders.internal/prophet\n");
	fprintf(fp, "\n; [section@program] (program: manager, worker, "
		    "notifier, prophetctl):\n"
		    "; keys for one program only, over the section's own, "
		    "e.g. a Kafka principal\n"
		    "; and a database user for each:\n"
		    "; [kafka@worker]\n"
		    "; sasl_username = prophet-worker\n"
		    "; sasl_password_file = /etc/prophet/kafka-worker.pass\n"
		    "; [db@worker]\n"
		    "; url = mysql://prophet_worker@db.internal:3306/prophet\n"
		    "; password_file = /etc/prophet/db-worker.pass\n");
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

	if (!strncmp(v, "rediss://", 9)) {
#ifndef HAVE_HIREDIS_SSL
		snprintf(err, errlen,
			 "rediss:// needs hiredis with TLS (hiredis_ssl), and "
			 "this build has none (Debian 12's hiredis 0.14 lacks "
			 "it): see docs/security.md for encrypting the link");
		return -1;
#else
		if (check_url(v, "rediss", err, errlen) < 0)
			return -1;
#endif
	} else if (check_url(v, "redis", err, errlen) < 0) {
		return -1;
	}
	url_parse(v, &u, err, errlen);
	if (u.query != NULL) {
		snprintf(err, errlen,
			 "no parameters after '?' (redis.tls_* "
			 "are keys)");
		url_clear(&u);
		return -1;
	}
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

/* The parameters db.url may carry after '?', as MySQL's URIs name them. */
static const char *const db_url_params[] = {"ssl-mode", "ssl-ca", "ssl-cert",
					    "ssl-key", NULL};

int
cfg_check_db_url(const char *v, char *err, size_t errlen)
{
	struct url u;
	char *mode;
	int rc = 0;

	if (check_url(v, "mysql", err, errlen) < 0)
		return -1;
	url_parse(v, &u, err, errlen);
	if (u.path == NULL || u.user == NULL) {
		snprintf(err, errlen,
			 "expected mysql://user[:password]@host:port/database");
		url_clear(&u);
		return -1;
	}
	if (url_query_check(u.query, db_url_params, err, errlen) < 0) {
		url_clear(&u);
		return -1;
	}
	mode = url_query_get(u.query, "ssl-mode");
	if (mode != NULL &&
	    (mode[0] == '\0' || cfg_check_tls_mode(mode, err, errlen) < 0)) {
		if (mode[0] == '\0')
			snprintf(err, errlen, "ssl-mode is empty");
		rc = -1;
	}
	xfree(mode);
	url_clear(&u);
	return rc;
}

static const char *const tls_mode_names[] = {"DISABLED", "REQUIRED",
					     "VERIFY_CA", "VERIFY_IDENTITY"};

const char *
cfg_tls_mode_name(enum cfg_tls_mode m)
{
	return tls_mode_names[m];
}

static int
tls_mode_parse(const char *v, enum cfg_tls_mode *m)
{
	for (size_t i = 0;
	     i < sizeof(tls_mode_names) / sizeof(tls_mode_names[0]); i++) {
		if (!strcasecmp(v, tls_mode_names[i])) {
			*m = (enum cfg_tls_mode)i;
			return 0;
		}
	}
	return -1;
}

int
cfg_check_tls_mode(const char *v, char *err, size_t errlen)
{
	enum cfg_tls_mode m;

	if (*v == '\0' || tls_mode_parse(v, &m) == 0)
		return 0;
	if (!strcasecmp(v, "PREFERRED"))
		snprintf(err, errlen,
			 "PREFERRED would fall back to plain text unnoticed: "
			 "REQUIRED, VERIFY_CA, VERIFY_IDENTITY or DISABLED");
	else
		snprintf(err, errlen,
			 "'%.40s' is not DISABLED, REQUIRED, VERIFY_CA or "
			 "VERIFY_IDENTITY",
			 v);
	return -1;
}

int
cfg_check_kafka_protocol(const char *v, char *err, size_t errlen)
{
	static const char *const ok[] = {"plaintext", "ssl", "sasl_plaintext",
					 "sasl_ssl"};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcasecmp(v, ok[i]))
			return 0;
	snprintf(err, errlen,
		 "'%.40s' is not plaintext, ssl, sasl_plaintext or sasl_ssl",
		 v);
	return -1;
}

int
cfg_check_sasl_mechanism(const char *v, char *err, size_t errlen)
{
	static const char *const ok[] = {"SCRAM-SHA-512", "SCRAM-SHA-256",
					 "PLAIN"};

	for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
		if (!strcmp(v, ok[i]))
			return 0;
	snprintf(err, errlen,
		 "'%.40s' is not SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN", v);
	return -1;
}

/* One of db.url's ssl-* parameters and its db.tls_* key: the value they
 * agree on (new, NULL if neither), or -1 if they differ. */
static int
db_tls_pick(const struct cfg *cfg, const struct url *u, const char *param,
	    enum cfg_id id, char **out, char *err, size_t errlen)
{
	char *p = url_query_get(u->query, param);
	const char *k = cfg->str[id];

	*out = NULL;
	if (p != NULL && k[0] != '\0' && strcasecmp(p, k)) {
		snprintf(err, errlen,
			 "db.%s: '%.200s', but db.url says %s=%.200s: give it "
			 "in one place",
			 cfg_defs[id].key, k, param, p);
		xfree(p);
		return -1;
	}
	if (p != NULL)
		*out = p;
	else if (k[0] != '\0')
		*out = xstrdup(k);
	return 0;
}

int
cfg_db_tls(const struct cfg *cfg, struct cfg_db_tls *t, char *err,
	   size_t errlen)
{
	struct url u;
	char *mode = NULL;
	int rc = -1;

	memset(t, 0, sizeof(*t));
	if (url_parse(cfg->str[CFG_DB_URL], &u, err, errlen) < 0)
		return -1;
	if (db_tls_pick(cfg, &u, "ssl-mode", CFG_DB_TLS_MODE, &mode, err,
			errlen) < 0 ||
	    db_tls_pick(cfg, &u, "ssl-ca", CFG_DB_TLS_CA, &t->ca, err, errlen) <
		    0 ||
	    db_tls_pick(cfg, &u, "ssl-cert", CFG_DB_TLS_CERT, &t->cert, err,
			errlen) < 0 ||
	    db_tls_pick(cfg, &u, "ssl-key", CFG_DB_TLS_KEY, &t->key, err,
			errlen) < 0)
		goto out;
	if (mode != NULL)
		tls_mode_parse(mode, &t->mode); /* checked by its key */
	else
		t->mode = t->ca ? CFG_TLS_VERIFY_IDENTITY : CFG_TLS_DISABLED;
	if (t->mode == CFG_TLS_DISABLED && (t->ca || t->cert || t->key)) {
		snprintf(err, errlen,
			 "db.tls_mode: DISABLED, but a CA or client "
			 "certificate is set (db.tls_ca, db.tls_cert, "
			 "db.tls_key or db.url's ssl-*)");
		goto out;
	}
	if (t->mode == CFG_TLS_REQUIRED && t->ca != NULL) {
		snprintf(err, errlen,
			 "db.tls_mode: REQUIRED does not verify the server, "
			 "yet db.tls_ca is set: VERIFY_CA or VERIFY_IDENTITY "
			 "to use it");
		goto out;
	}
	if (t->mode == CFG_TLS_VERIFY_CA && t->ca == NULL) {
		snprintf(err, errlen,
			 "db.tls_mode: VERIFY_CA needs db.tls_ca (the CA "
			 "certificates to verify with)");
		goto out;
	}
	if (!t->cert != !t->key) {
		snprintf(err, errlen,
			 "db.tls_cert and db.tls_key go together (a client "
			 "certificate and its key)");
		goto out;
	}
	rc = 0;
out:
	xfree(mode);
	url_clear(&u);
	if (rc < 0)
		cfg_db_tls_clear(t);
	return rc;
}

void
cfg_db_tls_clear(struct cfg_db_tls *t)
{
	xfree(t->ca);
	xfree(t->cert);
	xfree(t->key);
	memset(t, 0, sizeof(*t));
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
cfg_check_hostport_list(const char *v, char *err, size_t errlen)
{
	char item[300], host[256];
	const char *p = v, *e;
	int port;

	while (*p != '\0') {
		e = strchr(p, ',');
		if (e == NULL)
			e = p + strlen(p);
		if ((size_t)(e - p) >= sizeof(item)) {
			snprintf(err, errlen, "'%.40s...' is too long", p);
			return -1;
		}
		memcpy(item, p, (size_t)(e - p));
		item[e - p] = '\0';
		if (hostport_parse(item, host, sizeof(host), &port) < 0 ||
		    port <= 0) {
			snprintf(err, errlen,
				 "'%s' is not host:port (a list: "
				 "host:port,host:port)",
				 item);
			return -1;
		}
		p = *e ? e + 1 : e;
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
cfg_check_topic_or_empty(const char *v, char *err, size_t errlen)
{
	return *v == '\0' ? 0 : cfg_check_topic(v, err, errlen);
}

/* Comma (or space) separated topics, and with regexes "^..." regular
 * expressions on topic names (POSIX extended, as the managers' coverage
 * check compiles them): refused here rather than when a daemon starts. */
static int
check_topic_list(const char *v, int regexes, char *err, size_t errlen)
{
	char *copy = xstrdup(v), *save = NULL;
	int rc = 0;

	for (char *t = strtok_r(copy, ", ", &save); t != NULL && rc == 0;
	     t = strtok_r(NULL, ", ", &save)) {
		regex_t re;
		char why[128];
		int e;

		if (!regexes || t[0] != '^') {
			rc = cfg_check_topic(t, err, errlen);
			continue;
		}
		e = regcomp(&re, t, REG_EXTENDED | REG_NOSUB);
		if (e == 0) {
			regfree(&re);
			continue;
		}
		regerror(e, &re, why, sizeof(why));
		snprintf(err, errlen, "'%s' is not a regular expression: %s", t,
			 why);
		rc = -1;
	}
	xfree(copy);
	return rc;
}

int
cfg_check_topic_list(const char *v, char *err, size_t errlen)
{
	return check_topic_list(v, 0, err, errlen);
}

int
cfg_check_topics_or_regexes(const char *v, char *err, size_t errlen)
{
	return check_topic_list(v, 1, err, errlen);
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

/* A password in a URL and in a file: which one would win is a guess. */
static int
url_password_once(const struct cfg *cfg, enum cfg_id url, enum cfg_id file,
		  char *err, size_t errlen)
{
	struct url u;
	int twice;

	if (cfg->str[file][0] == '\0' ||
	    url_parse(cfg->str[url], &u, err, errlen) < 0)
		return 0;
	twice = u.password != NULL;
	url_clear(&u);
	if (twice) {
		snprintf(err, errlen,
			 "%s.%s: %s.%s holds a password too: give it in one "
			 "place (the file)",
			 cfg_defs[file].section, cfg_defs[file].key,
			 cfg_defs[url].section, cfg_defs[url].key);
		return -1;
	}
	return 0;
}

/* TLS files set for a link that does not use TLS: a mistake that would
 * send in plain text what the operator meant to protect. */
static int
tls_keys_unused(const struct cfg *cfg, const enum cfg_id *ids, size_t n,
		const char *why, char *err, size_t errlen)
{
	for (size_t i = 0; i < n; i++) {
		if (cfg->str[ids[i]][0] == '\0')
			continue;
		snprintf(err, errlen, "%s.%s is set, but %s",
			 cfg_defs[ids[i]].section, cfg_defs[ids[i]].key, why);
		return -1;
	}
	return 0;
}

/* A client certificate comes with its key. */
static int
cert_with_key(const struct cfg *cfg, enum cfg_id cert, enum cfg_id key,
	      char *err, size_t errlen)
{
	if (!cfg->str[cert][0] == !cfg->str[key][0])
		return 0;
	snprintf(err, errlen, "%s.%s and %s.%s go together",
		 cfg_defs[cert].section, cfg_defs[cert].key,
		 cfg_defs[key].section, cfg_defs[key].key);
	return -1;
}

static int
validate_links(const struct cfg *cfg, char *err, size_t errlen)
{
	static const enum cfg_id redis_tls[] = {
		CFG_REDIS_TLS_CA, CFG_REDIS_TLS_CERT, CFG_REDIS_TLS_KEY};
	static const enum cfg_id kafka_tls[] = {
		CFG_KAFKA_TLS_CA, CFG_KAFKA_TLS_CERT, CFG_KAFKA_TLS_KEY};
	const char *proto = cfg->str[CFG_KAFKA_SECURITY_PROTOCOL];
	struct cfg_db_tls t;

	if (url_password_once(cfg, CFG_DB_URL, CFG_DB_PASSWORD_FILE, err,
			      errlen) < 0 ||
	    url_password_once(cfg, CFG_REDIS_URL, CFG_REDIS_PASSWORD_FILE, err,
			      errlen) < 0)
		return -1;
	if (cfg_db_tls(cfg, &t, err, errlen) < 0)
		return -1;
	cfg_db_tls_clear(&t);
	if (strncmp(cfg->str[CFG_REDIS_URL], "rediss://", 9) &&
	    tls_keys_unused(cfg, redis_tls, 3, "redis.url is not rediss://",
			    err, errlen) < 0)
		return -1;
	if (cert_with_key(cfg, CFG_REDIS_TLS_CERT, CFG_REDIS_TLS_KEY, err,
			  errlen) < 0)
		return -1;
	if (strcasecmp(proto, "ssl") && strcasecmp(proto, "sasl_ssl") &&
	    tls_keys_unused(cfg, kafka_tls, 3,
			    "kafka.security_protocol is not ssl or sasl_ssl",
			    err, errlen) < 0)
		return -1;
	if (cert_with_key(cfg, CFG_KAFKA_TLS_CERT, CFG_KAFKA_TLS_KEY, err,
			  errlen) < 0)
		return -1;
	if (cert_with_key(cfg, CFG_HTTP_TLS_CLIENT_CERT,
			  CFG_HTTP_TLS_CLIENT_KEY, err, errlen) < 0)
		return -1;
	if (cfg->str[CFG_HTTP_TOKEN][0] != '\0' &&
	    cfg->str[CFG_HTTP_TOKEN_FILE][0] != '\0') {
		snprintf(err, errlen,
			 "http.token_file: http.token is set too: give the "
			 "token in one place (the file)");
		return -1;
	}
	for (size_t i = 0; i < cfg->n_extra; i++) {
		const struct cfg_extra *e = &cfg->extra[i];

		if (strncmp(e->section, "kafka.", 6) == 0 &&
		    kafka_passthrough_check(e->section, e->key, err, errlen) <
			    0)
			return -1;
	}
	return 0;
}

int
cfg_validate(const struct cfg *cfg, char *err, size_t errlen)
{
	static const enum cfg_id topics[] = {CFG_NOTIFIER_RETRY_TOPIC,
					     CFG_NOTIFIER_DEAD_LETTER_TOPIC,
					     CFG_TASK_ARCHIVE_TOPIC};
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
	return validate_links(cfg, err, errlen);
}

/* --check-config: a sasl_* protocol needs this program's principal when
 * it makes a Kafka client at start (the manager for the task topic check,
 * ingest or the archive), as the start would find. */
static int
kafka_at_start(const struct cfg *cfg)
{
	const char *prog = cfg->prog ? cfg->prog : "";

	if (!strcmp(prog, "manager"))
		return cfg->num[CFG_KAFKA_CHECK_TASK_TOPICS] ||
		       cfg->str[CFG_KAFKA_INGEST_TOPIC][0] != '\0' ||
		       cfg->str[CFG_TASK_ARCHIVE_TOPIC][0] != '\0';
	return !strcmp(prog, "worker") || !strcmp(prog, "notifier");
}

static int
check_kafka_principal(const struct cfg *cfg, char *err, size_t errlen)
{
	const char *prog = cfg->prog ? cfg->prog : "";

	if (!kafka_at_start(cfg) ||
	    strncasecmp(cfg->str[CFG_KAFKA_SECURITY_PROTOCOL], "sasl_", 5) ||
	    (cfg->str[CFG_KAFKA_SASL_USERNAME][0] != '\0' &&
	     cfg->str[CFG_KAFKA_SASL_PASSWORD_FILE][0] != '\0'))
		return 0;
	snprintf(err, errlen,
		 "kafka.security_protocol is %s: kafka.sasl_username and "
		 "kafka.sasl_password_file are needed by the %s (in [kafka], "
		 "or [kafka@%s])",
		 cfg->str[CFG_KAFKA_SECURITY_PROTOCOL], prog, prog);
	return -1;
}

/* The CA, certificate and key files of the links this program opens can
 * be read: a missing one was 'TLS/SSL error: No such file or directory'
 * from MariaDB, 'ssl.ca.location failed' from librdkafka, neither naming
 * the key or the file. */
/* Whether path (NULL or "": none) is given and cannot be read; err then
 * names the key section.key, the file and why. */
static int
unreadable(const char *section, const char *key, const char *path, char *err,
	   size_t errlen)
{
	if (path == NULL || path[0] == '\0' || access(path, R_OK) == 0)
		return 0;
	snprintf(err, errlen, "%s.%s: %s: %s", section, key, path,
		 strerror(errno));
	return 1;
}

static int
check_tls_files(const struct cfg *cfg, char *err, size_t errlen)
{
	static const struct {
		enum cfg_id id;
		const char *programs;
	} f[] = {
		{CFG_KAFKA_TLS_CA, ",kafka,"},
		{CFG_KAFKA_TLS_CERT, ",kafka,"},
		{CFG_KAFKA_TLS_KEY, ",kafka,"},
		{CFG_REDIS_TLS_CA, ",manager,worker,"},
		{CFG_REDIS_TLS_CERT, ",manager,worker,"},
		{CFG_REDIS_TLS_KEY, ",manager,worker,"},
		{CFG_HTTP_TLS_CA, ",manager,notifier,prophetctl,"},
		{CFG_HTTP_TLS_CLIENT_CERT, ",manager,notifier,prophetctl,"},
		{CFG_HTTP_TLS_CLIENT_KEY, ",manager,notifier,prophetctl,"},
	};
	const char *prog = cfg->prog ? cfg->prog : "";
	struct cfg_db_tls t;
	const char *db[3];
	char want[32];
	int rc = 0;

	snprintf(want, sizeof(want), ",%s,", prog);
	for (size_t i = 0; i < sizeof(f) / sizeof(f[0]); i++) {
		const char *path = cfg->str[f[i].id];
		int used = strcmp(f[i].programs, ",kafka,")
				   ? strstr(f[i].programs, want) != NULL
				   : kafka_at_start(cfg);

		if (used &&
		    unreadable(cfg_defs[f[i].id].section, cfg_defs[f[i].id].key,
			       path, err, errlen))
			return -1;
	}
	if (strstr(",manager,worker,notifier,", want) == NULL ||
	    cfg_db_tls(cfg, &t, err, errlen) < 0)
		return 0;
	db[0] = t.ca;
	db[1] = t.cert;
	db[2] = t.key;
	for (int i = 0; i < 3 && rc == 0; i++) {
		static const char *const key[] = {"tls_ca", "tls_cert",
						  "tls_key"};

		if (unreadable("db", key[i], db[i], err, errlen))
			rc = -1;
	}
	cfg_db_tls_clear(&t);
	return rc;
}

/* --check-config: this program's HTTPS listener would load its
 * certificate, key and client CA, as at start. */
static int
check_listener_tls(const struct cfg *cfg, char *err, size_t errlen)
{
	static const struct {
		const char *prog;
		enum cfg_id cert, key, ca;
	} l[] = {
		{"manager", CFG_HTTP_TLS_CERT, CFG_HTTP_TLS_KEY,
		 CFG_HTTP_TLS_CLIENT_CA},
		{"worker", CFG_WORKER_HTTP_TLS_CERT, CFG_WORKER_HTTP_TLS_KEY,
		 CFG_WORKER_HTTP_TLS_CLIENT_CA},
		{"notifier", CFG_NOTIFIER_HTTP_TLS_CERT,
		 CFG_NOTIFIER_HTTP_TLS_KEY, CFG_NOTIFIER_HTTP_TLS_CLIENT_CA},
	};
	char why[512];

	for (size_t i = 0; i < sizeof(l) / sizeof(l[0]); i++) {
		if (cfg->prog == NULL || strcmp(cfg->prog, l[i].prog) ||
		    cfg->str[l[i].cert][0] == '\0')
			continue;
		if (http_tls_check(cfg->str[l[i].cert], cfg->str[l[i].key],
				   cfg->str[l[i].ca], why, sizeof(why)) < 0) {
			snprintf(err, errlen, "%s.%s: %s",
				 cfg_defs[l[i].cert].section,
				 cfg_defs[l[i].cert].key, why);
			return -1;
		}
	}
	return 0;
}

/* --check-config: the secret files this program reads can be read, and
 * only by their owner; the manager's tokens file loads. */
static int
check_secret_files(const struct cfg *cfg, char *err, size_t errlen)
{
	char want[32], why[512];
	struct auth *a;

	snprintf(want, sizeof(want), ",%s,", cfg->prog ? cfg->prog : "");
	for (size_t i = 0;
	     i < sizeof(cfg_secret_files) / sizeof(cfg_secret_files[0]); i++) {
		char *s;

		if (strstr(cfg_secret_files[i].programs, want) == NULL)
			continue;
		s = cfg_secret(cfg, cfg_secret_files[i].id, err, errlen);
		if (s == NULL && err[0] != '\0')
			return -1;
		if (s != NULL &&
		    cfg_secret_files[i].id ==
			    CFG_NOTIFIER_CALLBACK_SIGNING_KEY_FILE &&
		    cfg_signing_keys(cfg, NULL, err, errlen) < 0) {
			secret_free(s);
			return -1;
		}
		secret_free(s);
	}
	if (cfg->prog != NULL && (!strcmp(cfg->prog, "notifier") ||
				  !strcmp(cfg->prog, "prophetctl"))) {
		char *t = cfg_http_token(cfg, err, errlen);

		if (t == NULL)
			return -1;
		secret_free(t);
	}
	if (cfg->prog == NULL || strcmp(cfg->prog, "manager"))
		return check_kafka_principal(cfg, err, errlen);
	a = auth_load(cfg->str[CFG_HTTP_TOKENS_FILE], why, sizeof(why));
	if (a == NULL) {
		snprintf(err, errlen, "http.tokens_file: %s", why);
		return -1;
	}
	auth_destroy(a);
	return check_kafka_principal(cfg, err, errlen);
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
			printf("%s %s (commit %s)\n", prog, PACKAGE_VERSION,
			       prophet_commit);
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
	cfg_set_program(cfg, strncmp(prog, "prophet-", 8) ? prog : prog + 8);
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
	if (check_tls_files(cfg, err, sizeof(err)) < 0) {
		fprintf(stderr, "%s: config: %s\n", prog, err);
		exit(1);
	}
	if (check && (check_secret_files(cfg, err, sizeof(err)) < 0 ||
		      check_listener_tls(cfg, err, sizeof(err)) < 0)) {
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
