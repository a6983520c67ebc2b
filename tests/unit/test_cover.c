#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdlib.h>
#include <string.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cover.h"
#include "xmalloc.h"

static struct cover *
parse(const char *s)
{
	char err[256];

	return cover_parse(s, strlen(s), err, sizeof(err));
}

/* The default subscription: every topic under the prefix, its dots
 * literal; without a prefix every topic but Kafka's own. */
static void
test_default_pattern(void **state)
{
	char *p, node[512];
	struct cover *c;

	(void)state;
	p = cover_default_pattern("t1.a-b_");
	assert_string_equal(p, "^t1\\.a-b_.*");
	snprintf(node, sizeof(node), "{\"patterns\":[\"^t1\\\\.a-b_.*\"]}");
	xfree(p);
	c = parse(node);
	assert_non_null(c);
	assert_true(cover_covers(c, "t1.a-b_orders"));
	assert_true(cover_covers(c, "t1.a-b_"));
	assert_false(cover_covers(c, "t1xa-b_orders")); /* the dot is literal */
	assert_false(cover_covers(c, "x.t1.a-b_orders"));
	cover_free(c);

	p = cover_default_pattern("");
	assert_string_equal(p, "^[^_].*");
	xfree(p);
	c = parse("{\"patterns\":[\"^[^_].*\"]}");
	assert_true(cover_covers(c, "orders"));
	assert_false(cover_covers(c, "__consumer_offsets"));
	cover_free(c);
}

/* Named topics by name; excluded ones never, whatever matches them. */
static void
test_topics_and_excluded(void **state)
{
	struct cover *c;

	(void)state;
	c = parse("{\"id\":\"n1\",\"topics\":[\"p.orders\",\"p.retry\"],"
		  "\"patterns\":[\"^p\\\\..*\"],\"excluded\":[\"p.dead\"]}");
	assert_non_null(c);
	assert_true(cover_covers(c, "p.orders"));
	assert_true(cover_covers(c, "p.other"));
	assert_false(cover_covers(c, "p.dead"));
	assert_string_equal(
		json_string_value(json_object_get(cover_json(c), "id")), "n1");
	cover_free(c);

	c = parse("{\"topics\":[\"p.orders\"]}");
	assert_true(cover_covers(c, "p.orders"));
	assert_false(cover_covers(c, "p.orders2"));
	assert_false(cover_covers(c, "p.order"));
	cover_free(c);
}

static void
test_not_a_node(void **state)
{
	(void)state;
	assert_null(parse("not json"));
	assert_null(parse("[1]"));
	assert_null(parse("{\"topics\":\"p.orders\"}"));
	assert_null(parse("{\"topics\":[1]}"));
	assert_null(parse("{\"patterns\":[\"^(\"]}"));
	cover_free(NULL);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_default_pattern),
		cmocka_unit_test(test_topics_and_excluded),
		cmocka_unit_test(test_not_a_node),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
