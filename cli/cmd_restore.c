#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

static void
draw(const json_t *st)
{
	cli_bar(cli_num(st, "slots_done"), cli_num(st, "slots_total"),
		"%lld/%lld slots, %lld tasks indexed",
		cli_num(st, "slots_done"), cli_num(st, "slots_total"),
		cli_num(st, "tasks_indexed"));
}

static int
restore_one_task(struct cli *c, const char *id)
{
	char path[1024], err[512];
	json_t *ans;
	long st;

	cli_task_path(path, sizeof(path), id, "/restore");
	st = cli_request(c, "POST", path, "", &ans, err, sizeof(err));
	if (st != 200)
		return cli_fail(st, ans, err);
	if (c->json)
		cli_print_json(ans);
	else
		printf("restored %s (%s)\n", id,
		       json_is_true(json_object_get(ans, "revived"))
			       ? "was expired, scheduled again"
			       : "re-indexed");
	json_decref(ans);
	return 0;
}

/* prophetctl restore [--slot N] [--expired] | --id ID: rebuild the Redis
 * index from the DB, with a progress bar. */
int
cmd_restore(struct cli *c, int argc, char **argv)
{
	json_t *req = json_object(), *ans, *st;
	char err[512], path[128];
	long code;
	char *body;

	for (int k = 1; k < argc; k++) {
		if (!strcmp(argv[k], "--expired")) {
			json_object_set_new(req, "expired", json_true());
		} else if (!strcmp(argv[k], "--slot") && k + 1 < argc) {
			long long slot;

			if (cli_int_opt(argv[k], argv[k + 1], &slot) < 0) {
				json_decref(req);
				return 2;
			}
			json_object_set_new(req, "slot", json_integer(slot));
			k++;
		} else if (!strcmp(argv[k], "--id") && k + 1 < argc) {
			json_decref(req);
			return restore_one_task(c, argv[k + 1]);
		} else {
			fprintf(stderr, "usage: prophetctl restore [--slot N] "
					"[--expired] | --id ID\n");
			json_decref(req);
			return 2;
		}
	}
	body = json_dumps(req, JSON_COMPACT);
	json_decref(req);
	code = cli_request(c, "POST", "/v1/admin/restore", body, &ans, err,
			   sizeof(err));
	free(body);
	if (code != 202)
		return cli_fail(code, ans, err);
	snprintf(path, sizeof(path), "/v1/admin/restore/%lld",
		 cli_num(ans, "job"));
	json_decref(ans);
	st = cli_follow(c, path, 200, draw, &code, err, sizeof(err));
	if (code != 200)
		return cli_fail(code, st, err);
	if (c->json) {
		cli_print_json(st);
	} else if (json_is_string(json_object_get(st, "error"))) {
		fprintf(stderr, "prophetctl: restore failed at slot %lld: %s\n",
			cli_num(st, "slots_done"),
			json_string_value(json_object_get(st, "error")));
		json_decref(st);
		return 1;
	} else {
		printf("restored %lld slots: %lld tasks indexed, %lld expired "
		       "tasks scheduled again, in %lld ms\n",
		       cli_num(st, "slots_total"), cli_num(st, "tasks_indexed"),
		       cli_num(st, "tasks_revived"), cli_num(st, "elapsed_ms"));
	}
	code = json_is_string(json_object_get(st, "error")) ? 1 : 0;
	json_decref(st);
	return (int)code;
}
