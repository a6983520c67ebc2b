#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "utf8.h"
#include "xmalloc.h"
#include "zknode.h"

static int
get_id(const json_t *o, const char *field, char *buf)
{
	const json_t *v = json_object_get(o, field);

	buf[0] = '\0';
	if (v == NULL || json_is_null(v))
		return 0;
	if (!json_is_string(v) || json_string_length(v) >= ZKNODE_ID_MAX)
		return -1;
	memcpy(buf, json_string_value(v), json_string_length(v) + 1);
	return 0;
}

/* A member's integer value; 0 if it is missing or not an integer. */
static int64_t
get_int(const json_t *o, const char *field)
{
	const json_t *v = json_object_get(o, field);

	return json_is_integer(v) ? json_integer_value(v) : 0;
}

/* The compact text of o, which it takes. */
static char *
dump(json_t *o)
{
	char *s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);

	json_decref(o);
	if (s == NULL)
		abort();
	return s;
}

int
slot_node_decode(const char *data, int len, struct slot_node *n)
{
	json_error_t jerr;
	json_t *o;
	int rc = -1;

	memset(n, 0, sizeof(*n));
	if (data == NULL || len <= 0)
		return -1;
	o = json_loadb(data, (size_t)len, 0, &jerr);
	if (!json_is_object(o))
		goto out;
	if (!json_is_integer(json_object_get(o, "slot")) ||
	    !json_is_integer(json_object_get(o, "epoch")))
		goto out;
	n->slot = (int)json_integer_value(json_object_get(o, "slot"));
	n->epoch = json_integer_value(json_object_get(o, "epoch"));
	n->updated_at = get_int(o, "updated_at");
	if (get_id(o, "owner", n->owner) < 0 ||
	    get_id(o, "requested", n->requested) < 0)
		goto out;
	rc = 0;
out:
	json_decref(o);
	return rc;
}

char *
slot_node_encode(const struct slot_node *n)
{
	json_t *o = json_object();

	/* Never NULL: a member left out would read as null (unowned). */
	json_object_set_new(o, "slot", json_integer(n->slot));
	json_object_set_new(o, "owner",
			    n->owner[0] ? utf8_json_str(n->owner)
					: json_null());
	json_object_set_new(o, "requested",
			    n->requested[0] ? utf8_json_str(n->requested)
					    : json_null());
	json_object_set_new(o, "epoch", json_integer(n->epoch));
	json_object_set_new(o, "updated_at", json_integer(n->updated_at));
	return dump(o);
}

static void
get_str(const json_t *o, const char *field, char *buf, size_t size)
{
	const json_t *v = json_object_get(o, field);

	buf[0] = '\0';
	if (json_is_string(v) && json_string_length(v) < size)
		memcpy(buf, json_string_value(v), json_string_length(v) + 1);
}

int
worker_node_decode(const char *data, int len, struct worker_node *n)
{
	json_t *o;
	int rc = -1;

	memset(n, 0, sizeof(*n));
	if (data == NULL || len <= 0)
		return -1;
	o = json_loadb(data, (size_t)len, 0, NULL);
	if (!json_is_object(o) || get_id(o, "id", n->id) < 0 ||
	    n->id[0] == '\0')
		goto out;
	get_str(o, "host", n->host, sizeof(n->host));
	get_str(o, "version", n->version, sizeof(n->version));
	get_str(o, "metrics", n->metrics, sizeof(n->metrics));
	n->pid = get_int(o, "pid");
	n->started_at = get_int(o, "started_at");
	n->metrics_tls = json_is_true(json_object_get(o, "metrics_tls"));
	rc = 0;
out:
	json_decref(o);
	return rc;
}

json_t *
worker_node_json(const struct worker_node *n)
{
	json_t *o = json_object();

	json_object_set_new(o, "id", utf8_json_str(n->id));
	json_object_set_new(o, "host", utf8_json_str(n->host));
	json_object_set_new(o, "pid", json_integer(n->pid));
	json_object_set_new(o, "started_at", json_integer(n->started_at));
	json_object_set_new(o, "version", utf8_json_str(n->version));
	if (n->metrics[0] != '\0')
		json_object_set_new(o, "metrics", utf8_json_str(n->metrics));
	if (n->metrics_tls)
		json_object_set_new(o, "metrics_tls", json_true());
	return o;
}

char *
worker_node_encode(const struct worker_node *n)
{
	return dump(worker_node_json(n));
}

int
cluster_config_verify(const char *data, int nslots, const char *path, char *err,
		      size_t errlen)
{
	json_t *j = data ? json_loads(data, 0, NULL) : NULL;
	json_t *s = json_object_get(j, "slots");
	int rc = -1;

	if (!json_is_integer(s))
		snprintf(err, errlen, "%s holds no slot count", path);
	else if (json_integer_value(s) != nslots)
		snprintf(err, errlen,
			 "cluster.slots = %d but the cluster at %s was created "
			 "with %lld slots; the slot count cannot change",
			 nslots, path, (long long)json_integer_value(s));
	else
		rc = 0;
	json_decref(j);
	return rc;
}
