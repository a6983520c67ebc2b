#ifdef HAVE_CONFIG_H
#include "config.h"
#endif

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include <event2/event.h>
#include <librdkafka/rdkafka.h>
#include <librdkafka/rdkafka_mock.h>

#include "cfg.h"
#include "kafka.h"

/*
 * A delivery report whose wake-up was missed (the pipe read dry before
 * the loop saw it) is still served, by the producer's 1 s poll: against
 * librdkafka's mock cluster, one message, its report queued, the pipe
 * emptied, then the loop run for 2.5 s. Without the poll the report never
 * comes (the pipe is written only when the queue turns non-empty).
 */

static int reports;

static void
dr(void *opaque, rd_kafka_resp_err_t err, void *arg)
{
	assert_int_equal(err, RD_KAFKA_RESP_ERR_NO_ERROR);
	reports++;
}

static void
test_missed_wakeup_served_by_poll(void **state)
{
	char err[512];
	rd_kafka_conf_t *mconf = rd_kafka_conf_new();
	rd_kafka_t *mrk;
	rd_kafka_mock_cluster_t *mc;
	struct cfg *cfg = cfg_create();
	struct event_base *base = event_base_new();
	struct kafka_producer *p;
	struct timeval run = {2, 500000};
	rd_kafka_resp_err_t e;
	size_t stolen = 0;

	mrk = rd_kafka_new(RD_KAFKA_PRODUCER, mconf, err, sizeof(err));
	assert_non_null(mrk);
	mc = rd_kafka_mock_cluster_new(mrk, 1);
	assert_non_null(mc);
	assert_int_equal(rd_kafka_mock_topic_create(mc, "t", 1, 1), 0);
	assert_int_equal(cfg_set(cfg, "kafka", "brokers",
				 rd_kafka_mock_cluster_bootstraps(mc), err,
				 sizeof(err)),
			 0);
	p = kafka_producer_create(base, cfg, dr, NULL, err, sizeof(err));
	assert_non_null(p);
	assert_int_equal(kafka_produce(p, "t", "k", 1, "v", 1,
				       rd_kafka_headers_new(1), NULL, &e),
			 0);
	/* The mock broker acknowledges within milliseconds: the report is
	 * queued and its wake-up written well within a second. */
	for (int i = 0; i < 20 && stolen == 0; i++) {
		usleep(100000);
		stolen += kafka_producer_test_steal_wakeup(p);
	}
	assert_true(stolen > 0);
	assert_int_equal(reports, 0);
	event_base_loopexit(base, &run);
	event_base_dispatch(base);
	assert_int_equal(reports, 1);
	kafka_producer_destroy(p, 1000);
	event_base_free(base);
	cfg_destroy(cfg);
	rd_kafka_mock_cluster_destroy(mc);
	rd_kafka_destroy(mrk);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_missed_wakeup_served_by_poll),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
