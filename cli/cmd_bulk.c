#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static int
usage(void)
{
	fprintf(stderr,
		"usage: prophetctl bulk cancel|shift|set-due [--topic T] "
		"[--due-from MS] [--due-to MS] [--status S] [--id-prefix P] "
		"[--key K] [--all] [--by-ms N | --due-at MS] [--dry-run] "
		"[--no-wait]\n");
	return 2;
}

/* total is the count when the job was recorded: tasks added since may
 * make it pass 100%. */
static void
draw(const json_t *st)
{
	cli_bar(cli_num(st, "scanned"), cli_num(st, "total"),
		"%lld/%lld: %lld changed, %lld firing, %lld skipped",
		cli_num(st, "scanned"), cli_num(st, "total"),
		cli_num(st, "changed"), cli_num(st, "firing"),
		cli_num(st, "skipped"));
}

static void
print_job(const json_t *j)
{
	char *f = json_dumps(json_object_get(j, "filter"), JSON_COMPACT);
	long long s = cli_num(j, "started_at"), e = cli_num(j, "finished_at");

	printf("job %lld %s %s by %s, filter %s\n", cli_num(j, "job"),
	       json_string_value(json_object_get(j, "action")),
	       json_string_value(json_object_get(j, "state")),
	       json_string_value(json_object_get(j, "who")), f ? f : "?");
	printf("  %lld of %lld scanned: %lld changed, %lld firing (left "
	       "alone), %lld skipped; %lld transactions%s",
	       cli_num(j, "scanned"), cli_num(j, "total"),
	       cli_num(j, "changed"), cli_num(j, "firing"),
	       cli_num(j, "skipped"), cli_num(j, "chunks"),
	       cli_num(j, "resumed") ? ", resumed" : "");
	if (s > 0 && e > 0)
		printf(", took %lld ms", e - s);
	putchar('\n');
	if (json_is_string(json_object_get(j, "cancelled_by")))
		printf("  cancelled by %s\n",
		       json_string_value(json_object_get(j, "cancelled_by")));
	if (json_array_size(json_object_get(j, "firing_ids")) > 0) {
		char *ids = json_dumps(json_object_get(j, "firing_ids"),
				       JSON_COMPACT);

		printf("  in flight: %s\n", ids);
		free(ids);
	}
	free(f);
}

/* A job's answer: printed (and freed), or the failure. */
static int
show_job(const struct cli *c, long code, json_t *ans, const char *err)
{
	if (code != 200)
		return cli_fail(code, ans, err);
	if (c->json)
		cli_print_json(ans);
	else
		print_job(ans);
	json_decref(ans);
	return 0;
}

/* Follows a job until done, with a progress bar on a terminal. */
static int
follow(struct cli *c, long long id)
{
	char path[64], err[512];
	json_t *st;
	long code;

	snprintf(path, sizeof(path), "/v1/admin/jobs/%lld", id);
	st = cli_follow(c, path, 250, draw, &code, err, sizeof(err));
	return show_job(c, code, st, err);
}

/* prophetctl bulk ACTION [filter...]: a bulk cancel or reschedule. */
int
cmd_bulk(struct cli *c, int argc, char **argv)
{
	json_t *req, *f, *ans;
	const char *action;
	int dry = 0, wait = 1;
	long long v;
	char err[512];
	char *body;
	long code;

	if (argc < 2)
		return usage();
	if (!strcmp(argv[1], "cancel"))
		action = "cancel";
	else if (!strcmp(argv[1], "shift"))
		action = "shift";
	else if (!strcmp(argv[1], "set-due"))
		action = "set_due";
	else
		return usage();
	req = json_pack("{s:s}", "action", action);
	f = json_object();
	for (int k = 2; k < argc; k++) {
		const char *a = argv[k],
			   *val = k + 1 < argc ? argv[k + 1] : NULL;

		if (!strcmp(a, "--dry-run")) {
			dry = 1;
		} else if (!strcmp(a, "--no-wait")) {
			wait = 0;
		} else if (!strcmp(a, "--all")) {
			json_object_set_new(f, "all", json_true());
		} else if (val == NULL) {
			fprintf(stderr,
				"prophetctl: bulk: '%s': unknown option, or "
				"its value is missing\n",
				a);
			goto bad;
		} else if (!strcmp(a, "--topic") || !strcmp(a, "--status") ||
			   !strcmp(a, "--id-prefix") || !strcmp(a, "--key")) {
			json_object_set_new(
				f,
				!strcmp(a, "--id-prefix") ? "id_prefix" : a + 2,
				json_string(val));
			k++;
		} else if (!strcmp(a, "--due-from") || !strcmp(a, "--due-to") ||
			   !strcmp(a, "--by-ms") || !strcmp(a, "--due-at")) {
			static const char *const names[][2] = {
				{"--due-from", "due_from"},
				{"--due-to", "due_to"},
				{"--by-ms", "by_ms"},
				{"--due-at", "due_at"}};
			/* The due range filters; by_ms and due_at are the
			 * action's. */
			json_t *into = !strcmp(a, "--due-from") ||
						       !strcmp(a, "--due-to")
					       ? f
					       : req;

			if (cli_int_opt(a, val, &v) < 0)
				goto bad;
			for (size_t n = 0; n < 4; n++)
				if (!strcmp(a, names[n][0]))
					json_object_set_new(into, names[n][1],
							    json_integer(v));
			k++;
		} else {
			fprintf(stderr,
				"prophetctl: bulk: unknown option '%s'\n", a);
			goto bad;
		}
	}
	if (json_object_size(f) == 0) {
		fprintf(stderr, "prophetctl: bulk: give a filter (--topic, "
				"--due-from, --due-to, --status, --id-prefix, "
				"--key), or --all for every scheduled task\n");
		goto bad;
	}
	json_object_set_new(req, "filter", f);
	if (dry)
		json_object_set_new(req, "dry_run", json_true());
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	code = cli_request(c, "POST", "/v1/tasks/bulk", body, &ans, err,
			   sizeof(err));
	free(body);
	if (code != (dry ? 200 : 202))
		return cli_fail(code, ans, err);
	if (dry || !wait) {
		if (c->json)
			cli_print_json(ans);
		else if (dry)
			printf("%lld scheduled tasks match\n",
			       cli_num(ans, "matched"));
		else
			printf("job %lld recorded: %lld tasks match\n",
			       cli_num(ans, "job"), cli_num(ans, "total"));
		json_decref(ans);
		return 0;
	}
	v = cli_num(ans, "job");
	json_decref(ans);
	return follow(c, v);
bad:
	json_decref(f);
	json_decref(req);
	return usage();
}

/* prophetctl jobs ID --cancel: the job stops after its chunk in
 * progress rolls back. */
static int
cancel_job(struct cli *c, long long id)
{
	char err[512], path[80];
	json_t *ans;
	long code;

	snprintf(path, sizeof(path), "/v1/admin/jobs/%lld/cancel", id);
	code = cli_request(c, "POST", path, NULL, &ans, err, sizeof(err));
	return show_job(c, code, ans, err);
}

/* prophetctl jobs [ID [--wait | --cancel]]: the bulk jobs, or one. */
int
cmd_jobs(struct cli *c, int argc, char **argv)
{
	char err[512], path[64];
	json_t *ans, *j;
	long long id;
	size_t i;
	long code;

	if (argc >= 2) {
		if (cli_int(argv[1], &id) < 0 || id < 1) {
			fprintf(stderr, "usage: prophetctl jobs [ID [--wait | "
					"--cancel]]\n");
			return 2;
		}
		if (argc >= 3 && !strcmp(argv[2], "--wait"))
			return follow(c, id);
		if (argc >= 3 && !strcmp(argv[2], "--cancel"))
			return cancel_job(c, id);
		if (argc >= 3) {
			fprintf(stderr, "usage: prophetctl jobs [ID [--wait | "
					"--cancel]]\n");
			return 2;
		}
		snprintf(path, sizeof(path), "/v1/admin/jobs/%lld", id);
		code = cli_request(c, "GET", path, NULL, &ans, err,
				   sizeof(err));
		return show_job(c, code, ans, err);
	}
	code = cli_request(c, "GET", "/v1/admin/jobs", NULL, &ans, err,
			   sizeof(err));
	if (code != 200)
		return cli_fail(code, ans, err);
	if (c->json) {
		cli_print_json(ans);
	} else {
		printf("%6s %-8s %-8s %10s %10s %8s %8s  %s\n", "JOB", "ACTION",
		       "STATE", "TOTAL", "CHANGED", "FIRING", "SKIPPED", "WHO");
		json_array_foreach (json_object_get(ans, "jobs"), i, j)
			printf("%6lld %-8s %-8s %10lld %10lld %8lld %8lld  "
			       "%s\n",
			       cli_num(j, "job"),
			       json_string_value(json_object_get(j, "action")),
			       json_string_value(json_object_get(j, "state")),
			       cli_num(j, "total"), cli_num(j, "changed"),
			       cli_num(j, "firing"), cli_num(j, "skipped"),
			       json_string_value(json_object_get(j, "who")));
	}
	json_decref(ans);
	return 0;
}
