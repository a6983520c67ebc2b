#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli.h"

/* prophetctl topics | pause TOPIC | resume TOPIC --policy fire|skip
 * [--rate N]: GET /v1/topics, POST /v1/topics/{topic}/pause and /resume. */

int
cmd_topics(struct cli *c, int argc, char **argv)
{
	json_t *ans, *list, *t;
	char err[512], buf[32];
	long code;
	size_t i;

	if (argc != 1) {
		fprintf(stderr, "usage: prophetctl topics\n");
		return 2;
	}
	code = cli_request(c, "GET", "/v1/topics", NULL, &ans, err,
			   sizeof(err));
	if (code != 200)
		return cli_fail(code, ans, err);
	if (c->json) {
		cli_print_json(ans);
		json_decref(ans);
		return 0;
	}
	list = json_object_get(ans, "topics");
	printf("%-32s %-8s %10s %10s %-23s %-23s %8s\n", "TOPIC", "STATE",
	       "PENDING", "OVERDUE", "NEXT DUE", "PAUSED SINCE", "FIRED/1m");
	json_array_foreach (list, i, t) {
		int paused = json_is_true(json_object_get(t, "paused"));
		const json_t *nd = json_object_get(t, "next_due_at");
		char since[32] = "-";

		if (paused)
			cli_time(cli_num(t, "paused_since"), since,
				 sizeof(since));
		printf("%-32s %-8s %10lld %10lld %-23s %-23s %8lld\n",
		       json_string_value(json_object_get(t, "topic")),
		       paused ? "paused" : "active", cli_num(t, "pending"),
		       cli_num(t, "overdue"),
		       json_is_integer(nd) ? cli_time(json_integer_value(nd),
						      buf, sizeof(buf))
					   : "-",
		       since, cli_num(t, "fired_last_minute"));
	}
	if (json_array_size(list) == 0)
		printf("no topics with scheduled tasks or paused\n");
	json_decref(ans);
	return 0;
}

int
cmd_pause(struct cli *c, int argc, char **argv)
{
	json_t *ans;
	char err[512], path[300], t[32];
	long code;

	if (argc != 2) {
		fprintf(stderr, "usage: prophetctl pause TOPIC\n");
		return 2;
	}
	if (strlen(argv[1]) > 200) {
		fprintf(stderr, "prophetctl: topic too long\n");
		return 2;
	}
	snprintf(path, sizeof(path), "/v1/topics/%s/pause", argv[1]);
	code = cli_request(c, "POST", path, "{}", &ans, err, sizeof(err));
	if (code != 200)
		return cli_fail(code, ans, err);
	if (c->json)
		cli_print_json(ans);
	else
		printf("%s paused since %s%s\n", argv[1],
		       cli_time(cli_num(ans, "paused_since"), t, sizeof(t)),
		       json_is_true(json_object_get(ans, "notified"))
			       ? ""
			       : " (workers learn it from the DB within a "
				 "second)");
	json_decref(ans);
	return 0;
}

int
cmd_resume(struct cli *c, int argc, char **argv)
{
	json_t *ans, *body;
	const char *policy = NULL, *topic = NULL;
	char err[512], path[300], until[32], *doc;
	long long rate = 0;
	long code;

	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--policy") && i + 1 < argc)
			policy = argv[++i];
		else if (!strcmp(argv[i], "--rate") && i + 1 < argc) {
			char *end;

			rate = strtoll(argv[++i], &end, 10);
			if (*end != '\0' || rate < 1) {
				fprintf(stderr, "prophetctl: --rate must be a "
						"positive integer\n");
				return 2;
			}
		} else if (topic == NULL && argv[i][0] != '-')
			topic = argv[i];
		else {
			topic = NULL;
			break;
		}
	}
	if (topic == NULL || policy == NULL || strlen(topic) > 200) {
		fprintf(stderr, "usage: prophetctl resume TOPIC --policy "
				"fire|skip [--rate N]\n");
		return 2;
	}
	body = json_pack("{s:s}", "policy", policy);
	if (rate > 0)
		json_object_set_new(body, "rate", json_integer(rate));
	doc = json_dumps(body, JSON_COMPACT);
	json_decref(body);
	snprintf(path, sizeof(path), "/v1/topics/%s/resume", topic);
	code = cli_request(c, "POST", path, doc, &ans, err, sizeof(err));
	free(doc);
	if (code != 200)
		return cli_fail(code, ans, err);
	if (c->json)
		cli_print_json(ans);
	else if (!strcmp(policy, "skip"))
		printf("%s resumed: %lld tasks that fell due while paused "
		       "expired\n",
		       topic, cli_num(ans, "skipped"));
	else if (rate > 0)
		printf("%s resumed: %lld overdue tasks fire oldest first at "
		       "%lld/s, until about %s\n",
		       topic, cli_num(ans, "backlog"), rate,
		       cli_time(cli_num(ans, "drain_until"), until,
				sizeof(until)));
	else
		printf("%s resumed: %lld overdue tasks fire now, oldest "
		       "first\n",
		       topic, cli_num(ans, "backlog"));
	json_decref(ans);
	return 0;
}
