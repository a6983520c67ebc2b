#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli.h"

/* A pass started within this after a request, or the request failed. */
#define START_WAIT_MS 30000

static long long
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* "3d 4h", "12m 5s", "800 ms" */
static const char *
age(long long ms, char *buf, size_t len)
{
	long long s = ms / 1000;

	if (ms < 1000)
		snprintf(buf, len, "%lld ms", ms);
	else if (s < 60)
		snprintf(buf, len, "%.1f s", (double)ms / 1000);
	else if (s < 3600)
		snprintf(buf, len, "%lldm %llds", s / 60, s % 60);
	else if (s < 86400)
		snprintf(buf, len, "%lldh %lldm", s / 3600, s % 3600 / 60);
	else
		snprintf(buf, len, "%lldd %lldh", s / 86400, s % 86400 / 3600);
	return buf;
}

static void
print_pass(const char *what, const json_t *ps)
{
	const json_t *d = json_object_get(ps, "deleted");
	char t[32], a[32];

	printf("%s pass %lld by %s, started %s, %s%s\n", what,
	       cli_num(ps, "pass"),
	       json_string_value(json_object_get(ps, "holder")),
	       cli_time(cli_num(ps, "started_at"), t, sizeof(t)),
	       json_is_null(json_object_get(ps, "finished_at")) ? "running "
								: "took ",
	       age(cli_num(ps, "duration_ms"), a, sizeof(a)));
	printf("  deleted %lld tasks (%lld delivered, %lld cancelled, %lld "
	       "expired) of %lld eligible, %lld log rows, %lld archived; %lld "
	       "transactions%s\n",
	       cli_num(ps, "tasks_deleted"), cli_num(d, "delivered"),
	       cli_num(d, "cancelled"), cli_num(d, "expired"),
	       cli_num(ps, "eligible"), cli_num(ps, "log_rows_deleted"),
	       cli_num(ps, "archived"), cli_num(ps, "chunks"),
	       cli_num(ps, "resumed") ? ", resumed" : "");
}

static int
show_status(struct cli *c)
{
	json_t *st;
	char err[512];
	long code = cli_request(c, "GET", "/v1/admin/prune", NULL, &st, err,
				sizeof(err));
	const json_t *cur, *last;

	if (code != 200)
		return cli_fail(code, st, err);
	if (c->json) {
		cli_print_json(st);
		json_decref(st);
		return 0;
	}
	printf("retention %lld ms, log retention %lld ms, pass every %lld ms "
	       "(this manager: %s)\n",
	       cli_num(st, "retention_ms"), cli_num(st, "log_retention_ms"),
	       cli_num(st, "interval_ms"),
	       json_is_true(json_object_get(st, "enabled")) ? "prunes when it "
							      "holds the lock"
							    : "pruning off");
	printf("pruner: %s\n",
	       json_string_value(json_object_get(st, "holder")) ?: "none yet");
	cur = json_object_get(st, "current");
	last = json_object_get(st, "last");
	if (json_is_object(cur))
		print_pass("current", cur);
	if (json_is_object(last))
		print_pass("last", last);
	if (!json_is_object(cur) && !json_is_object(last))
		printf("no pass yet\n");
	json_decref(st);
	return 0;
}

static int
dry_run(struct cli *c)
{
	json_t *ans, *s, *b;
	char err[512], t[32], a[32];
	size_t i, k;
	long code = cli_request(c, "POST", "/v1/admin/prune",
				"{\"dry_run\":true}", &ans, err, sizeof(err));

	if (code != 200)
		return cli_fail(code, ans, err);
	if (c->json) {
		cli_print_json(ans);
		json_decref(ans);
		return 0;
	}
	printf("a pass now would delete the tasks finished before %s "
	       "(task.retention %s):\n",
	       cli_time(cli_num(ans, "cutoff"), t, sizeof(t)),
	       age(cli_num(ans, "retention_ms"), a, sizeof(a)));
	printf("%-10s %12s %12s  %s\n", "STATUS", "ELIGIBLE", "KEPT", "OLDEST");
	json_array_foreach (json_object_get(ans, "statuses"), i, s) {
		const json_t *o = json_object_get(s, "oldest_at");

		printf("%-10s %12lld %12lld  %s\n",
		       json_string_value(json_object_get(s, "status")),
		       cli_num(s, "eligible"),
		       cli_num(s, "kept_by_retrying_callback"),
		       json_is_integer(o)
			       ? age(now_ms() - json_integer_value(o), a,
				     sizeof(a))
			       : "-");
		json_array_foreach (json_object_get(s, "ages"), k, b) {
			char lo[32], hi[32];
			const json_t *to = json_object_get(b, "to_s");

			if (cli_num(b, "count") == 0)
				continue;
			age(cli_num(b, "from_s") * 1000, lo, sizeof(lo));
			if (json_is_integer(to))
				age(json_integer_value(to) * 1000, hi,
				    sizeof(hi));
			printf("  age %s .. %-12s %12lld\n", lo,
			       json_is_integer(to) ? hi : "",
			       cli_num(b, "count"));
		}
	}
	printf("total %lld tasks, with their log rows (KEPT: a callback "
	       "still retrying)\n",
	       cli_num(ans, "eligible"));
	json_decref(ans);
	return 0;
}

static long long
pass_no(const json_t *st, const char *which)
{
	const json_t *ps = json_object_get(st, which);

	return json_is_object(ps) ? cli_num(ps, "pass") : 0;
}

static void
draw(const json_t *ps, int tty)
{
	char a[32];

	if (!tty)
		return;
	cli_bar(cli_num(ps, "tasks_deleted"), cli_num(ps, "eligible"),
		"%lld/%lld tasks, %lld log rows, %lld archived, %s   ",
		cli_num(ps, "tasks_deleted"), cli_num(ps, "eligible"),
		cli_num(ps, "log_rows_deleted"), cli_num(ps, "archived"),
		age(cli_num(ps, "duration_ms"), a, sizeof(a)));
}

/* Asks the pruner for a pass and follows it to its end. */
static int
prune_now(struct cli *c, int wait)
{
	json_t *ans, *st = NULL;
	char err[512];
	long long base, t0 = now_ms();
	int tty = isatty(STDERR_FILENO) && !c->json, rc = 1;
	long code = cli_request(c, "POST", "/v1/admin/prune", "{}", &ans, err,
				sizeof(err));

	if (code != 202)
		return cli_fail(code, ans, err);
	/* The pass that answers is one after every pass known now. */
	base = pass_no(ans, "current") > pass_no(ans, "last")
		       ? pass_no(ans, "current")
		       : pass_no(ans, "last");
	json_decref(ans);
	if (!wait) {
		printf("pass requested\n");
		return 0;
	}
	for (;;) {
		const json_t *cur, *last;

		json_decref(st);
		code = cli_request(c, "GET", "/v1/admin/prune", NULL, &st, err,
				   sizeof(err));
		if (code != 200)
			return cli_fail(code, st, err);
		cur = json_object_get(st, "current");
		last = json_object_get(st, "last");
		if (pass_no(st, "last") > base) {
			if (tty)
				fputc('\n', stderr);
			if (c->json)
				cli_print_json(last);
			else
				print_pass("done:", last);
			rc = 0;
			break;
		}
		if (json_is_object(cur) && cli_num(cur, "pass") > base) {
			draw(cur, tty);
		} else if (!json_is_object(cur) &&
			   now_ms() - t0 > START_WAIT_MS) {
			fprintf(stderr,
				"prophetctl: no pass started within %d s: does "
				"a manager hold the pruner lock "
				"(task.retention "
				"above 0)? holder: %s\n",
				START_WAIT_MS / 1000,
				json_string_value(json_object_get(st, "holder"))
					?: "none");
			break;
		}
		usleep(200 * 1000);
	}
	json_decref(st);
	return rc;
}

/* prophetctl prune [--dry-run | --now [--no-wait]]: retention. */
int
cmd_prune(struct cli *c, int argc, char **argv)
{
	int dry = 0, now = 0, wait = 1;

	for (int k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "--dry-run")) {
			dry = 1;
		} else if (!strcmp(argv[k], "--now")) {
			now = 1;
		} else if (!strcmp(argv[k], "--no-wait")) {
			wait = 0;
		} else {
			fprintf(stderr, "usage: prophetctl prune [--dry-run | "
					"--now [--no-wait]]\n");
			return 2;
		}
	}
	if (dry && now) {
		fprintf(stderr, "prophetctl: --dry-run or --now, not both\n");
		return 2;
	}
	if (dry)
		return dry_run(c);
	if (now)
		return prune_now(c, wait);
	return show_status(c);
}
