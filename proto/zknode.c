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
	if (json_is_integer(json_object_get(o, "updated_at")))
		n->updated_at =
			json_integer_value(json_object_get(o, "updated_at"));
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
	char *s;

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
	s = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER);
	json_decref(o);
	if (s == NULL)
		abort();
	return s;
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
