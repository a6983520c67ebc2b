#ifndef PROPHET_CFG_H
#define PROPHET_CFG_H

#include <stdint.h>
#include <stdio.h>

/*
 * The configuration is one table: every key with its type, default, bounds,
 * whether SIGHUP may reload it, and its help text. The same table validates
 * input, answers lookups and writes deploy/prophet.conf.example.
 *
 * X(id, section, key, type, default, min, max, check, reload, help)
 */
#define CFG_KEYS(X)                                                            \
	X(CLUSTER_ROOT, "cluster", "root", CFG_STR, "/prophet", 0, 0,          \
	  cfg_check_zk_path, 0, "ZooKeeper root path of this cluster")         \
	X(CLUSTER_SLOTS, "cluster", "slots", CFG_INT, "16", 1, 1024, NULL, 0,  \
	  "number of slots; fixed when the cluster is first created")          \
	X(ZK_HOSTS, "zookeeper", "hosts", CFG_STR, "127.0.0.1:2181", 0, 0,     \
	  cfg_check_nonempty, 0, "ZooKeeper connect string host:port[,...]")   \
	X(ZK_SESSION_TIMEOUT_MS, "zookeeper", "session_timeout_ms", CFG_INT,   \
	  "10000", 2000, 120000, NULL, 0,                                      \
	  "ZooKeeper session timeout; a worker stops claiming after 2/3 of "   \
	  "it disconnected")                                                   \
	X(ZK_AUTH_FILE, "zookeeper", "auth_file", CFG_STR, "", 0, 0, NULL, 0,  \
	  "digest credentials user:password on one line, mode 600: the "       \
	  "session authenticates with them and every node Prophet creates "    \
	  "gets all rights for this identity and read for everyone (the "      \
	  "manager also repairs the ACLs of the tree); empty: no "             \
	  "authentication, nodes open to anyone (insecure)")                   \
	X(REDIS_URL, "redis", "url", CFG_STR, "redis://127.0.0.1:6379/0", 0,   \
	  0, cfg_check_redis_url, 0,                                           \
	  "Redis index: redis://[user[:password]@]host:port/db (an ACL user "  \
	  "sends AUTH user password); rediss:// for TLS where built with "     \
	  "hiredis_ssl (docs/security.md); the password better in "            \
	  "password_file")                                                     \
	X(REDIS_PASSWORD_FILE, "redis", "password_file", CFG_STR, "", 0, 0,    \
	  NULL, 0,                                                             \
	  "file holding the password of redis.url's user (one line, mode "     \
	  "600); empty: the URL's, if any")                                    \
	X(REDIS_TLS_CA, "redis", "tls_ca", CFG_STR, "", 0, 0, NULL, 0,         \
	  "rediss://: CA certificates (PEM) the server's certificate must "    \
	  "chain to; empty: the system's")                                     \
	X(REDIS_TLS_CERT, "redis", "tls_cert", CFG_STR, "", 0, 0, NULL, 0,     \
	  "rediss://: client certificate (PEM), for a server with "            \
	  "tls-auth-clients")                                                  \
	X(REDIS_TLS_KEY, "redis", "tls_key", CFG_STR, "", 0, 0, NULL, 0,       \
	  "rediss://: the client certificate's private key (PEM, mode 600)")   \
	X(REDIS_TIMEOUT_MS, "redis", "timeout_ms", CFG_INT, "2000", 100,       \
	  60000, NULL, 0, "Redis connect and command timeout")                 \
	X(REDIS_SENTINELS, "redis", "sentinels", CFG_STR, "", 0, 0,            \
	  cfg_check_hostport_list, 0,                                          \
	  "Redis Sentinels host:port[,...]: the primary is looked up through " \
	  "them (SENTINEL get-master-addr-by-name, each tried in turn), "      \
	  "followed on +switch-master, and a failover makes every slot be "    \
	  "rebuilt from the DB; redis.url then gives only user, password "     \
	  "and db (its host:port is ignored); empty: redis.url's server")      \
	X(REDIS_MASTER_NAME, "redis", "master_name", CFG_STR, "prophet", 0, 0, \
	  cfg_check_nonempty, 0,                                               \
	  "the name the Sentinels monitor the primary under (used with "       \
	  "redis.sentinels)")                                                  \
	X(REDIS_SENTINEL_PASSWORD_FILE, "redis", "sentinel_password_file",     \
	  CFG_STR, "", 0, 0, NULL, 0,                                          \
	  "file holding the Sentinels' password (their requirepass, one "      \
	  "line, mode 600): AUTH to every Sentinel; empty: none")              \
	X(DB_URL, "db", "url", CFG_STR,                                        \
	  "mysql://prophet@127.0.0.1:3306/prophet", 0, 0, cfg_check_db_url, 0, \
	  "database (MySQL protocol): "                                        \
	  "mysql://user[:password]@host:port/db[?ssl-mode=M&ssl-ca=FILE] "     \
	  "(ssl-cert, ssl-key too: the tls_* keys); the password better in "   \
	  "password_file")                                                     \
	X(DB_PASSWORD_FILE, "db", "password_file", CFG_STR, "", 0, 0, NULL, 0, \
	  "file holding the password of db.url's user (one line, mode 600); "  \
	  "empty: the URL's, if any")                                          \
	X(DB_TLS_MODE, "db", "tls_mode", CFG_STR, "", 0, 0,                    \
	  cfg_check_tls_mode, 0,                                               \
	  "TLS to the database, as MySQL's ssl-mode: DISABLED, REQUIRED "      \
	  "(encrypted, server not verified), VERIFY_CA (its certificate "      \
	  "chains to tls_ca), VERIFY_IDENTITY (and names db.url's host); "     \
	  "empty: VERIFY_IDENTITY with a tls_ca, else DISABLED")               \
	X(DB_TLS_CA, "db", "tls_ca", CFG_STR, "", 0, 0, NULL, 0,               \
	  "CA certificates (PEM) the database's certificate must chain to")    \
	X(DB_TLS_CERT, "db", "tls_cert", CFG_STR, "", 0, 0, NULL, 0,           \
	  "client certificate (PEM), for users created REQUIRE X509")          \
	X(DB_TLS_KEY, "db", "tls_key", CFG_STR, "", 0, 0, NULL, 0,             \
	  "the client certificate's private key (PEM, mode 600)")              \
	X(DB_POOL_SIZE, "db", "pool_size", CFG_INT, "4", 1, 64, NULL, 0,       \
	  "database connections (each on its own thread)")                     \
	X(DB_IDLE_TRANSACTION_TIMEOUT_S, "db", "idle_transaction_timeout_s",   \
	  CFG_INT, "5", 0, 3600, NULL, 0,                                      \
	  "MariaDB ends a connection of ours that sits this long inside a "    \
	  "transaction (a stopped or frozen daemon): its row locks go, so "    \
	  "they cannot hold up a slot's next owner; 0: the server's setting")  \
	X(DB_MIGRATE_COPY_MAX_ROWS, "db", "migrate_copy_max_rows", CFG_INT,    \
	  "100000", 0, 2000000000, NULL, 0,                                    \
	  "a migration that rebuilds the task table by copy runs at start "    \
	  "only up to this many rows (InnoDB's estimate); above, the manager " \
	  "logs its statement for a maintenance window and runs on")           \
	X(DB_BATCH_MAX, "db", "batch_max", CFG_INT, "1000", 1, 10000, NULL, 0, \
	  "most rows written by one group-commit INSERT/UPDATE")               \
	X(DB_GROUP_COMMIT_US, "db", "group_commit_us", CFG_INT, "1000", 0,     \
	  1000000, NULL, 1,                                                    \
	  "longest wait of a submission for others to share its commit")       \
	X(DB_GROUP_COMMIT_ROWS, "db", "group_commit_rows", CFG_INT, "32", 1,   \
	  10000, NULL, 1,                                                      \
	  "waiting rows that start a commit at once beside running ones")      \
	X(KAFKA_BROKERS, "kafka", "brokers", CFG_STR, "127.0.0.1:9092", 0, 0,  \
	  cfg_check_nonempty, 0, "Kafka bootstrap servers")                    \
	X(KAFKA_TOPIC_PREFIX, "kafka", "topic_prefix", CFG_STR, "", 0, 0,      \
	  cfg_check_topic_prefix, 0,                                           \
	  "due task of topic T goes to Kafka topic <prefix>T")                 \
	X(KAFKA_INGEST_TOPIC, "kafka", "ingest_topic", CFG_STR, "", 0, 0,      \
	  NULL, 0, "optional: task submissions consumed from this topic")      \
	X(KAFKA_INGEST_GROUP, "kafka", "ingest_group", CFG_STR,                \
	  "prophet-ingest", 0, 0, cfg_check_nonempty, 0,                       \
	  "consumer group of the managers reading ingest_topic")               \
	X(KAFKA_INGEST_ERRORS_TOPIC, "kafka", "ingest_errors_topic", CFG_STR,  \
	  "", 0, 0, NULL, 0,                                                   \
	  "where refused submissions go, with the reason in headers; "         \
	  "default <ingest_topic>.errors")                                     \
	X(KAFKA_INGEST_MAX_PENDING_BYTES, "kafka", "ingest_max_pending_bytes", \
	  CFG_INT, "67108864", 1048576, 68719476736LL, NULL, 0,                \
	  "bytes of ingest messages held at once (read, not yet stored or "    \
	  "sent to the errors topic); beyond it reading pauses")               \
	X(KAFKA_LINGER_MS, "kafka", "linger_ms", CFG_INT, "2", 0, 1000, NULL,  \
	  0, "producer linger.ms (batching delay)")                            \
	X(KAFKA_QUEUE_MAX, "kafka", "queue_max", CFG_INT, "200000", 1000,      \
	  10000000, NULL, 0,                                                   \
	  "most messages waiting in the producer before claiming pauses")      \
	X(KAFKA_CREATE_TOPICS, "kafka", "create_topics", CFG_BOOL, "true", 0,  \
	  1, NULL, 0,                                                          \
	  "at start, Prophet's own topics that do not exist yet are created "  \
	  "(the notifier's retry and dead-letter topics, the ingest topic "    \
	  "and "                                                               \
	  "its errors topic): brokers with auto.create.topics.enable=false "   \
	  "need this or an operator")                                          \
	X(KAFKA_TOPIC_PARTITIONS, "kafka", "topic_partitions", CFG_INT, "0",   \
	  0, 10000, NULL, 0,                                                   \
	  "partitions of a topic create_topics makes; 0: the brokers' "        \
	  "num.partitions")                                                    \
	X(KAFKA_TOPIC_REPLICATION, "kafka", "topic_replication", CFG_INT, "0", \
	  0, 32767, NULL, 0,                                                   \
	  "replication factor of a topic create_topics makes; 0: the "         \
	  "brokers' default.replication.factor")                               \
	X(KAFKA_TOPIC_MIN_INSYNC, "kafka", "topic_min_insync", CFG_INT, "0",   \
	  0, 32767, NULL, 0,                                                   \
	  "min.insync.replicas of a topic create_topics makes; 0: the "        \
	  "brokers' default")                                                  \
	X(KAFKA_CHECK_TASK_TOPICS, "kafka", "check_task_topics", CFG_BOOL,     \
	  "true", 0, 1, NULL, 0,                                               \
	  "the manager refuses (422 topic_unknown) a task whose Kafka topic "  \
	  "the brokers say does not exist; brokers that cannot be asked do "   \
	  "not refuse anything. The manager's principal needs Describe on "    \
	  "the task topics")                                                   \
	X(KAFKA_CREATE_TASK_TOPICS, "kafka", "create_task_topics", CFG_BOOL,   \
	  "false", 0, 1, NULL, 0,                                              \
	  "with check_task_topics: a task topic that does not exist is "       \
	  "created (topic_partitions, topic_replication, topic_min_insync; "   \
	  "Create permission needed) instead of refused")                      \
	X(KAFKA_EXACTLY_ONCE, "kafka", "exactly_once", CFG_BOOL, "false", 0,   \
	  1, NULL, 0,                                                          \
	  "each worker publishes through one transactional producer "          \
	  "(transactional.id <root>.worker.<id>.<start>) with a marker "       \
	  "record per task in eos_topic; a slot's next owner fences the "      \
	  "producer that last published for it: a read_committed consumer "    \
	  "gets every task exactly once across worker failures "               \
	  "(docs/architecture.md); needs Kafka transactions (Write on the "    \
	  "TransactionalId prefix <root>.worker.)")                            \
	X(KAFKA_EOS_TOPIC, "kafka", "eos_topic", CFG_STR, "", 0, 0, NULL, 0,   \
	  "with exactly_once: the marker topic, at least cluster.slots "       \
	  "partitions (made so when missing); empty: "                         \
	  "<topic_prefix><root>.fired")                                        \
	X(KAFKA_EOS_PARTITION, "kafka", "eos_partition", CFG_INT, "-1", -1,    \
	  100000, NULL, 0,                                                     \
	  "with exactly_once: the partition of eos_topic this worker writes "  \
	  "its markers to (one for all its slots, so a transaction touches "   \
	  "one marker partition); -1: by a hash of worker.id. Workers may "    \
	  "share one; distinct ones make takeovers read less")                 \
	X(KAFKA_EOS_INTERVAL_MS, "kafka", "eos_interval_ms", CFG_INT, "20", 0, \
	  1000, NULL, 0,                                                       \
	  "with exactly_once: the least time between the starts of two "       \
	  "transactions of a worker (fired tasks gather meanwhile, and while " \
	  "one is out); more is fewer, larger transactions, later tasks")      \
	X(KAFKA_EOS_MAX_RECORDS, "kafka", "eos_max_records", CFG_INT, "2000",  \
	  1, 100000, NULL, 0,                                                  \
	  "with exactly_once: most tasks in one transaction")                  \
	X(KAFKA_STATIC_MEMBERSHIP, "kafka", "static_membership", CFG_BOOL,     \
	  "true", 0, 1, NULL, 0,                                               \
	  "the notifier's and the ingest managers' consumers are static "      \
	  "group members (group.instance.id from host and listen address): "   \
	  "one restarted takes its partitions back at once, one stopped for "  \
	  "good keeps them until session_timeout_ms")                          \
	X(KAFKA_SESSION_TIMEOUT_MS, "kafka", "session_timeout_ms", CFG_INT,    \
	  "10000", 6000, 300000, NULL, 0,                                      \
	  "consumer group session timeout: how long a member that went "       \
	  "without leaving (killed, or a static member stopped) keeps its "    \
	  "partitions; heartbeats every tenth of it, at most 1 s")             \
	X(KAFKA_SECURITY_PROTOCOL, "kafka", "security_protocol", CFG_STR,      \
	  "plaintext", 0, 0, cfg_check_kafka_protocol, 0,                      \
	  "plaintext, ssl, sasl_plaintext or sasl_ssl, for every producer "    \
	  "and consumer")                                                      \
	X(KAFKA_SASL_MECHANISM, "kafka", "sasl_mechanism", CFG_STR,            \
	  "SCRAM-SHA-512", 0, 0, cfg_check_sasl_mechanism, 0,                  \
	  "sasl_*: SCRAM-SHA-512, SCRAM-SHA-256 or PLAIN")                     \
	X(KAFKA_SASL_USERNAME, "kafka", "sasl_username", CFG_STR, "", 0, 0,    \
	  NULL, 0,                                                             \
	  "sasl_*: the principal; one per program with [kafka@worker], "       \
	  "[kafka@notifier], [kafka@manager] (ingest) sections")               \
	X(KAFKA_SASL_PASSWORD_FILE, "kafka", "sasl_password_file", CFG_STR,    \
	  "", 0, 0, NULL, 0,                                                   \
	  "sasl_*: file holding the principal's password (one line, mode "     \
	  "600)")                                                              \
	X(KAFKA_TLS_CA, "kafka", "tls_ca", CFG_STR, "", 0, 0, NULL, 0,         \
	  "ssl, sasl_ssl: CA certificates (PEM) the brokers' certificates "    \
	  "must chain to (their names are checked too); empty: the system's")  \
	X(KAFKA_TLS_CERT, "kafka", "tls_cert", CFG_STR, "", 0, 0, NULL, 0,     \
	  "ssl, sasl_ssl: client certificate (PEM), for brokers with "         \
	  "ssl.client.auth")                                                   \
	X(KAFKA_TLS_KEY, "kafka", "tls_key", CFG_STR, "", 0, 0, NULL, 0,       \
	  "the client certificate's private key (PEM, mode 600)")              \
	X(HTTP_LISTEN, "http", "listen", CFG_STR, "127.0.0.1:7070", 0, 0,      \
	  cfg_check_listen, 0, "manager API address (loopback by default)")    \
	X(HTTP_MAX_BODY_BYTES, "http", "max_body_bytes", CFG_INT, "4194304",   \
	  1024, 67108864, NULL, 0, "largest request body accepted")            \
	X(HTTP_MAX_BATCH, "http", "max_batch", CFG_INT, "1000", 1, 10000,      \
	  NULL, 0, "most tasks in one POST /v1/tasks/batch")                   \
	X(HTTP_TOKENS_FILE, "http", "tokens_file", CFG_STR, "", 0, 0, NULL, 1, \
	  "bearer tokens with roles, one '<token> <role>[,<role>]' a line "    \
	  "(roles: submit, read, admin; a token may be stored as "             \
	  "sha256:<hex>), mode 600; empty: no authentication")                 \
	X(HTTP_TOKEN, "http", "token", CFG_STR, "", 0, 0, NULL, 0,             \
	  "the token prophetctl sends (or PROPHET_TOKEN in its environment) "  \
	  "and the notifier submits retry tasks with (role submit); better "   \
	  "in token_file")                                                     \
	X(HTTP_TOKEN_FILE, "http", "token_file", CFG_STR, "", 0, 0, NULL, 0,   \
	  "file holding http.token (one line, mode 600), instead of the "      \
	  "token in this file")                                                \
	X(HTTP_TOPICS_ALLOWED, "http", "topics_allowed", CFG_STR, "", 0, 0,    \
	  cfg_check_topic_list, 1,                                             \
	  "comma-separated topics tasks may use; empty: any valid topic")      \
	X(HTTP_TIMEOUT_S, "http", "timeout_s", CFG_INT, "30", 1, 3600, NULL,   \
	  0,                                                                   \
	  "longest time to receive a request (headers and body, however "      \
	  "slowly sent), to sit idle between requests and to take an answer")  \
	X(HTTP_MAX_CONNECTIONS, "http", "max_connections", CFG_INT, "1024", 1, \
	  1000000, NULL, 0,                                                    \
	  "most open client connections; at the limit idle and slow ones "     \
	  "make room, else more wait in the listen backlog; lowered (with a "  \
	  "warning) to fit the open-file limit less 512")                      \
	X(HTTP_MAX_BODY_MEMORY_BYTES, "http", "max_body_memory_bytes",         \
	  CFG_INT, "268435456", 0, 68719476736LL, NULL, 0,                     \
	  "request bodies being received at once (their Content-Length); "     \
	  "beyond it 503; 0 no limit")                                         \
	X(HTTP_TLS_CERT, "http", "tls_cert", CFG_STR, "", 0, 0, NULL, 0,       \
	  "PEM certificate chain: the API and console serve HTTPS only "       \
	  "(TLS 1.2+); re-read on SIGHUP; empty: plain HTTP")                  \
	X(HTTP_TLS_KEY, "http", "tls_key", CFG_STR, "", 0, 0, NULL, 0,         \
	  "PEM private key of http.tls_cert (readable by the service only)")   \
	X(HTTP_TLS_CLIENT_CA, "http", "tls_client_ca", CFG_STR, "", 0, 0,      \
	  NULL, 0,                                                             \
	  "PEM CA bundle: clients must present a certificate it signed "       \
	  "(mutual TLS); empty: none asked")                                   \
	X(HTTP_TLS_CA, "http", "tls_ca", CFG_STR, "", 0, 0, NULL, 0,           \
	  "PEM CA bundle Prophet's own HTTPS clients trust (prophetctl, the "  \
	  "notifier's retry submissions, the manager reading worker "          \
	  "metrics); empty: the system's")                                     \
	X(HTTP_TLS_CLIENT_CERT, "http", "tls_client_cert", CFG_STR, "", 0, 0,  \
	  NULL, 0,                                                             \
	  "PEM certificate chain Prophet's own HTTPS clients present when a "  \
	  "server asks for one (mutual TLS: http.tls_client_ca, "              \
	  "worker.http_tls_client_ca); empty: none")                           \
	X(HTTP_TLS_CLIENT_KEY, "http", "tls_client_key", CFG_STR, "", 0, 0,    \
	  NULL, 0,                                                             \
	  "PEM private key of http.tls_client_cert (readable by the service "  \
	  "only)")                                                             \
	X(HTTP_CALLBACK_HOSTS_ALLOWED, "http", "callback_hosts_allowed",       \
	  CFG_STR, "", 0, 0, NULL, 0,                                          \
	  "comma-separated hosts callback URLs may name ('.example.com' "      \
	  "also allows its subdomains); empty: any host")                      \
	X(PULL_MAX_GROUPS, "pull", "max_groups", CFG_INT, "64", 1, 10000,      \
	  NULL, 0,                                                             \
	  "pull consumer groups (a group on a topic) a manager serves at "     \
	  "once, one Kafka consumer each; a request for another answers 429")  \
	X(PULL_MAX_WAITING, "pull", "max_waiting", CFG_INT, "512", 1, 1000000, \
	  NULL, 0,                                                             \
	  "pull requests waiting for a task at once (long polls); more are "   \
	  "answered 429; never more than half of http.max_connections")        \
	X(PULL_MAX_WAIT_MS, "pull", "max_wait_ms", CFG_INT, "20000", 0,        \
	  300000, NULL, 0,                                                     \
	  "longest a pull request waits for a task (a longer wait_ms is cut "  \
	  "to it); also how long mykit's GET /get/{topic} waits")              \
	X(PULL_VISIBILITY_MS, "pull", "visibility_ms", CFG_INT, "30000", 100,  \
	  43200000, NULL, 0,                                                   \
	  "a task handed out and not acknowledged within this is handed out "  \
	  "again (a request may ask for another with visibility_ms)")          \
	X(PULL_IDLE_GROUP_S, "pull", "idle_group_s", CFG_INT, "300", 1, 86400, \
	  NULL, 0,                                                             \
	  "a group without requests for this long is closed: its consumer "    \
	  "leaves the Kafka group, its offsets stay in Kafka")                 \
	X(PULL_MAX_BATCH, "pull", "max_batch", CFG_INT, "100", 1, 10000, NULL, \
	  0, "most tasks one pull request takes (a larger max is cut to it)")  \
	X(PULL_MAX_IN_HAND, "pull", "max_in_hand", CFG_INT, "10000", 10,       \
	  10000000, NULL, 0,                                                   \
	  "messages a group holds (waiting to be handed out, or handed out "   \
	  "and not acknowledged) before its consumer stops fetching")          \
	X(PULL_MAX_IN_HAND_BYTES, "pull", "max_in_hand_bytes", CFG_INT,        \
	  "67108864", 65536, 68719476736LL, NULL, 0,                           \
	  "bytes of message bodies a group holds before its consumer stops "   \
	  "fetching")                                                          \
	X(PULL_GROUP_PREFIX, "pull", "group_prefix", CFG_STR, "prophet-pull.", \
	  0, 0, cfg_check_nonempty, 0,                                         \
	  "Kafka group.id of pull group G on topic T: <prefix>G:<kafka "       \
	  "topic of T>, apart from the users' own consumer groups")            \
	X(PULL_MYKIT_GROUP, "pull", "mykit_group", CFG_STR, "mykit", 0, 0,     \
	  cfg_check_topic, 0,                                                  \
	  "the pull group of mykit-delay's GET /get/{topic}")                  \
	X(TASK_MAX_BODY_BYTES, "task", "max_body_bytes", CFG_INT, "65536", 1,  \
	  16777215, NULL, 0, "largest task body")                              \
	X(TASK_MAX_HEADERS_BYTES, "task", "max_headers_bytes", CFG_INT,        \
	  "16384", 64, 60000, NULL, 0,                                         \
	  "most bytes the headers of a task (and of its callback) take as "    \
	  "JSON; more is refused with 413")                                    \
	X(TASK_MAX_DELAY_MS, "task", "max_delay_ms", CFG_INT, "315576000000",  \
	  1000, 3155760000000, NULL, 0,                                        \
	  "furthest due time accepted, from now (default 10 years)")           \
	X(TASK_HORIZON_MS, "task", "horizon_ms", CFG_INT, "1800000", 10000,    \
	  86400000, NULL, 0,                                                   \
	  "tasks due within this time are indexed in Redis, later ones only "  \
	  "in the DB; not larger on a worker than on the managers")            \
	X(TASK_INDEX_MARGIN_MS, "task", "index_margin_ms", CFG_INT, "60000",   \
	  10000, 3600000, NULL, 0,                                             \
	  "a task submitted, rescheduled or recurring due before now + "       \
	  "horizon_ms + this is indexed in Redis at once, a later one by the " \
	  "worker's loader: more than the clock skew between hosts plus the "  \
	  "loader's 5 s round")                                                \
	X(TASK_BUCKET_MS, "task", "bucket_ms", CFG_INT, "60000", 0, 3600000,   \
	  NULL, 0,                                                             \
	  "tasks due after bucket_near_ms wait in Redis in append-only lists " \
	  "of bucket_ms of due time (about half the memory); 0: off; the "     \
	  "same on every daemon")                                              \
	X(TASK_BUCKET_NEAR_MS, "task", "bucket_near_ms", CFG_INT, "120000",    \
	  3000, 3600000, NULL, 0,                                              \
	  "tasks due sooner go straight to the due set; a bucket moves into "  \
	  "it this long before it starts")                                     \
	X(TASK_RETENTION, "task", "retention", CFG_DURATION, "7d", 0,          \
	  3155760000000, NULL, 0,                                              \
	  "how long a finished task (delivered, cancelled, expired, an "       \
	  "ended series) and its log are kept after its last change; a "       \
	  "retrying callback keeps it; 0: forever")                            \
	X(TASK_LOG_RETENTION, "task", "log_retention", CFG_DURATION, "0", 0,   \
	  3155760000000, NULL, 0,                                              \
	  "log rows of recurring series, and of tasks gone, older than this "  \
	  "are deleted; 0: as task.retention")                                 \
	X(TASK_PRUNE_INTERVAL, "task", "prune_interval", CFG_DURATION, "1m",   \
	  100, 86400000, NULL, 0,                                              \
	  "pause between two prune passes (of the manager holding the lock)")  \
	X(TASK_PRUNE_CHUNK, "task", "prune_chunk", CFG_INT, "1000", 1, 10000,  \
	  NULL, 0, "tasks (or log rows) deleted by one prune transaction")     \
	X(TASK_PRUNE_PAUSE_MS, "task", "prune_pause_ms", CFG_INT, "20", 0,     \
	  60000, NULL, 0, "pause after each prune transaction")                \
	X(TASK_BULK_CHUNK, "task", "bulk_chunk", CFG_INT, "2000", 1, 10000,    \
	  NULL, 0, "tasks one transaction of a bulk job changes")              \
	X(TASK_BULK_PAUSE_MS, "task", "bulk_pause_ms", CFG_INT, "0", 0, 60000, \
	  NULL, 0, "pause after each transaction of a bulk job (throttle)")    \
	X(TASK_BULK_MAX_JOBS, "task", "bulk_max_jobs", CFG_INT, "8", 1, 1000,  \
	  NULL, 1,                                                             \
	  "bulk jobs queued or running at once; a POST /v1/tasks/bulk "        \
	  "beyond it is answered 429")                                         \
	X(TASK_ARCHIVE_TOPIC, "task", "archive_topic", CFG_STR, "", 0, 0,      \
	  cfg_check_topic_or_empty, 0,                                         \
	  "optional: each finished task's final record (as GET ?log=1 shows "  \
	  "it) is published here (prefix added), once, before it is pruned")   \
	X(WORKER_ID, "worker", "id", CFG_STR, "", 0, 0, cfg_check_worker_id,   \
	  0, "unique worker id; default hostname-pid")                         \
	X(WORKER_HTTP_LISTEN, "worker", "http_listen", CFG_STR,                \
	  "127.0.0.1:7071", 0, 0, cfg_check_listen, 0,                         \
	  "worker /metrics and /healthz address")                              \
	X(WORKER_HTTP_TLS_CERT, "worker", "http_tls_cert", CFG_STR, "", 0, 0,  \
	  NULL, 0, "as http.tls_cert, for worker.http_listen")                 \
	X(WORKER_HTTP_TLS_KEY, "worker", "http_tls_key", CFG_STR, "", 0, 0,    \
	  NULL, 0, "as http.tls_key, for worker.http_listen")                  \
	X(WORKER_HTTP_TLS_CLIENT_CA, "worker", "http_tls_client_ca", CFG_STR,  \
	  "", 0, 0, NULL, 0, "as http.tls_client_ca, for worker.http_listen")  \
	X(WORKER_LOOKAHEAD_MS, "worker", "lookahead_ms", CFG_INT, "1500", 100, \
	  60000, NULL, 0,                                                      \
	  "due ids read this far ahead into the in-memory timing wheel")       \
	X(WORKER_SCAN_INTERVAL_MS, "worker", "scan_interval_ms", CFG_INT,      \
	  "200", 10, 10000, NULL, 0,                                           \
	  "how often each owned slot is scanned (from where the last scan "    \
	  "ended; from the start at least every lookahead_ms - 2 x this)")     \
	X(WORKER_SCAN_BATCH, "worker", "scan_batch", CFG_INT, "5000", 10,      \
	  100000, NULL, 0, "most ids read from one slot per scan")             \
	X(WORKER_CLAIM_BATCH, "worker", "claim_batch", CFG_INT, "500", 1,      \
	  10000, NULL, 0, "most tasks claimed by one Redis round trip")        \
	X(WORKER_CLAIM_AHEAD_MS, "worker", "claim_ahead_ms", CFG_INT, "10", 0, \
	  1000, NULL, 0,                                                       \
	  "tasks are claimed this long before they are due and published at "  \
	  "their due millisecond (a cancel then answers 409)")                 \
	X(WORKER_CLAIM_GROUP_MS, "worker", "claim_group_ms", CFG_INT, "4", 1,  \
	  1000, NULL, 0,                                                       \
	  "a slot's tasks due within this many ms of each other are claimed "  \
	  "in one Redis call, up to claim_ahead_ms + this - 1 ms early (1: "   \
	  "each due millisecond claimed on its own)")                          \
	X(WORKER_RT_PRIORITY, "worker", "rt_priority", CFG_INT, "0", 0, 99,    \
	  NULL, 0,                                                             \
	  "1..99: the firing loop (claims, timing wheel, publishes) runs at "  \
	  "this SCHED_RR real-time priority, so that a busy database or bulk " \
	  "job on the same host does not delay publishes (needs "              \
	  "LimitRTPRIO= or CAP_SYS_NICE; refused at start otherwise); 0: off") \
	X(WORKER_LEASE_MS, "worker", "lease_ms", CFG_INT, "30000", 1000,       \
	  3600000, NULL, 0,                                                    \
	  "a claimed task not confirmed delivered within this is re-fired")    \
	X(WORKER_MISFIRE_THRESHOLD_MS, "worker", "misfire_threshold_ms",       \
	  CFG_INT, "5000", 0, 86400000, NULL, 0,                               \
	  "an occurrence of a recurring task published later than this "       \
	  "after its time is a misfire: its misfire policy applies")           \
	X(WORKER_MAX_CLOCK_SKEW_MS, "worker", "max_clock_skew_ms", CFG_INT,    \
	  "1000", 1, 3600000, NULL, 0,                                         \
	  "a worker or manager whose clock is off the reference (Redis TIME) " \
	  "by more than this logs a warning and sets prophet_clock_skewed; "   \
	  "due times are always judged by the earlier of the two clocks")      \
	X(NOTIFIER_HTTP_LISTEN, "notifier", "http_listen", CFG_STR,            \
	  "127.0.0.1:7072", 0, 0, cfg_check_listen, 0,                         \
	  "notifier /metrics and /healthz address")                            \
	X(NOTIFIER_HTTP_TLS_CERT, "notifier", "http_tls_cert", CFG_STR, "", 0, \
	  0, NULL, 0, "as http.tls_cert, for notifier.http_listen")            \
	X(NOTIFIER_HTTP_TLS_KEY, "notifier", "http_tls_key", CFG_STR, "", 0,   \
	  0, NULL, 0, "as http.tls_key, for notifier.http_listen")             \
	X(NOTIFIER_HTTP_TLS_CLIENT_CA, "notifier", "http_tls_client_ca",       \
	  CFG_STR, "", 0, 0, NULL, 0,                                          \
	  "as http.tls_client_ca, for notifier.http_listen")                   \
	X(NOTIFIER_GROUP, "notifier", "group", CFG_STR, "prophet-notifier", 0, \
	  0, cfg_check_nonempty, 0, "Kafka consumer group of the notifiers")   \
	X(NOTIFIER_TOPICS, "notifier", "topics", CFG_STR, "", 0, 0,            \
	  cfg_check_topics_or_regexes, 0,                                      \
	  "comma-separated task topics to consume (the topic prefix is "       \
	  "added); an entry starting with ^ is a regular expression on the "   \
	  "Kafka topic names; empty: every task topic (^<topic_prefix>.*)")    \
	X(NOTIFIER_RETRY_TOPIC, "notifier", "retry_topic", CFG_STR,            \
	  "prophet.callback-retry", 0, 0, cfg_check_topic, 0,                  \
	  "task topic of the retry tasks the notifier submits and consumes "   \
	  "(the API takes only the notifier's signed ones)")                   \
	X(NOTIFIER_DEAD_LETTER_TOPIC, "notifier", "dead_letter_topic",         \
	  CFG_STR, "prophet.callback-dead", 0, 0, cfg_check_topic, 0,          \
	  "where a callback goes after its last failed attempt (the topic "    \
	  "prefix is added), with the error in headers")                       \
	X(NOTIFIER_MANAGER_URL, "notifier", "manager_url", CFG_STR,            \
	  "http://127.0.0.1:7070", 0, 0, cfg_check_nonempty, 0,                \
	  "manager API the retry tasks are submitted to (with http.token)")    \
	X(NOTIFIER_MAX_ATTEMPTS, "notifier", "max_attempts", CFG_INT, "5", 1,  \
	  100, NULL, 0, "callback attempts of a task without max_attempts")    \
	X(NOTIFIER_BACKOFF_BASE_MS, "notifier", "backoff_base_ms", CFG_INT,    \
	  "1000", 10, 3600000, NULL, 0,                                        \
	  "delay before the second attempt; doubles with each attempt")        \
	X(NOTIFIER_BACKOFF_MAX_MS, "notifier", "backoff_max_ms", CFG_INT,      \
	  "600000", 10, 86400000, NULL, 0, "longest delay between attempts")   \
	X(NOTIFIER_BACKOFF_JITTER_PCT, "notifier", "backoff_jitter_pct",       \
	  CFG_INT, "20", 0, 100, NULL, 0,                                      \
	  "a delay is shortened by a pseudo-random 0..this percent of it")     \
	X(NOTIFIER_TIMEOUT_MS, "notifier", "timeout_ms", CFG_INT, "10000", 1,  \
	  300000, NULL, 0, "request timeout of a callback without timeout_ms") \
	X(NOTIFIER_MAX_TIMEOUT_MS, "notifier", "max_timeout_ms", CFG_INT,      \
	  "30000", 1, 300000, NULL, 0,                                         \
	  "longest request timeout a callback gets, whatever its timeout_ms "  \
	  "asks; not below notifier.timeout_ms")                               \
	X(NOTIFIER_MAX_RESPONSE_BYTES, "notifier", "max_response_bytes",       \
	  CFG_INT, "65536", 1024, 67108864, NULL, 0,                           \
	  "most bytes of a callback's answer read (headers and body); "        \
	  "reading stops there and the status received decides")               \
	X(NOTIFIER_CALLBACK_NETWORKS_ALLOWED, "notifier",                      \
	  "callback_networks_allowed", CFG_STR, "", 0, 0, cfg_check_cidr_list, \
	  0,                                                                   \
	  "comma-separated CIDRs callbacks may connect to although refused "   \
	  "by default (loopback, private, link-local, CGNAT, multicast, "      \
	  "reserved), e.g. 10.1.0.0/16, fd00::/8")                             \
	X(NOTIFIER_CALLBACK_SIGNING_KEY_FILE, "notifier",                      \
	  "callback_signing_key_file", CFG_STR, "", 0, 0, NULL, 1,             \
	  "file (mode 600) of keys callbacks are signed with (Standard "       \
	  "Webhooks: webhook-id, webhook-timestamp, webhook-signature): "      \
	  "whsec_<base64 of 24-64 random bytes>, several separated by "        \
	  "spaces while rotating; empty: unsigned")                            \
	X(NOTIFIER_MAX_REDIRECTS, "notifier", "max_redirects", CFG_INT, "0",   \
	  0, 20, NULL, 0, "redirects followed by a callback (0: none)")        \
	X(NOTIFIER_MAX_INFLIGHT, "notifier", "max_inflight", CFG_INT, "256",   \
	  1, 100000, NULL, 0, "callbacks running at once, all hosts")          \
	X(NOTIFIER_HOST_MAX_INFLIGHT, "notifier", "host_max_inflight",         \
	  CFG_INT, "32", 1, 100000, NULL, 0,                                   \
	  "callbacks running at once to one host:port")                        \
	X(NOTIFIER_HOST_RATE, "notifier", "host_rate", CFG_INT, "0", 0,        \
	  1000000, NULL, 0,                                                    \
	  "callbacks started per second to one host:port (0: no limit)")       \
	X(NOTIFIER_HOST_BURST, "notifier", "host_burst", CFG_INT, "10", 1,     \
	  1000000, NULL, 0,                                                    \
	  "callbacks one host:port may get at once above "                     \
	  "its rate after a quiet time")                                       \
	X(NOTIFIER_MAX_PENDING, "notifier", "max_pending", CFG_INT, "10000",   \
	  10, 1000000, NULL, 0,                                                \
	  "messages held (waiting, running or being recorded) before "         \
	  "consuming pauses")                                                  \
	X(NOTIFIER_STOP_GRACE_MS, "notifier", "stop_grace_ms", CFG_INT,        \
	  "10000", 0, 300000, NULL, 0,                                         \
	  "on SIGTERM, how long running callbacks may finish")                 \
	X(LOG_LEVEL, "log", "level", CFG_STR, "info", 0, 0, cfg_check_level,   \
	  1, "debug, info, warn or error")

/* CFG_DURATION: "7d", "60s", "250ms" or bare ms; cfg_int() gives ms. */
enum cfg_type { CFG_STR, CFG_INT, CFG_BOOL, CFG_DURATION };

enum cfg_id {
#define CFG_ENUM(id, ...) CFG_##id,
	CFG_KEYS(CFG_ENUM)
#undef CFG_ENUM
		CFG__COUNT
};

struct cfg;

/* A config with every key at its default. */
struct cfg *cfg_create(void);
void cfg_destroy(struct cfg *cfg);
/* Sets one key from its text form, validating it. */
int cfg_set(struct cfg *cfg, const char *section, const char *key,
	    const char *value, char *err, size_t errlen);
/* "section.key=value", as given to --set. */
int cfg_set_arg(struct cfg *cfg, const char *arg, char *err, size_t errlen);
int cfg_load_file(struct cfg *cfg, const char *path, char *err, size_t errlen);

const char *cfg_str(const struct cfg *cfg, enum cfg_id id);
int64_t cfg_int(const struct cfg *cfg, enum cfg_id id);
const char *cfg_path(const struct cfg *cfg);

/*
 * Pass-through settings of [kafka.client] (every Kafka client),
 * [kafka.producer], [kafka.consumer] and [notifier.routes].
 */
size_t cfg_extra_count(const struct cfg *cfg, const char *section);
void cfg_extra_get(const struct cfg *cfg, const char *section, size_t i,
		   const char **key, const char **value);

/* The rules between keys (a timeout bound, Kafka's topic name length):
 * -1 with err naming the key. cfg_from_args applies them. */
int cfg_validate(const struct cfg *cfg, char *err, size_t errlen);

/* The database's TLS: db.tls_* merged with db.url's ssl-* parameters
 * (cfg_validate made sure they agree). */
enum cfg_tls_mode {
	CFG_TLS_DISABLED,
	CFG_TLS_REQUIRED,
	CFG_TLS_VERIFY_CA,
	CFG_TLS_VERIFY_IDENTITY
};
struct cfg_db_tls {
	enum cfg_tls_mode mode;
	char *ca, *cert, *key; /* NULL if not set */
};
int cfg_db_tls(const struct cfg *cfg, struct cfg_db_tls *t, char *err,
	       size_t errlen);
void cfg_db_tls_clear(struct cfg_db_tls *t);
const char *cfg_tls_mode_name(enum cfg_tls_mode m);

/*
 * The program reading the configuration ("manager", "worker", "notifier",
 * "prophetctl"): the keys of its [section@program] sections override the
 * [section] ones; set before loading (cfg_from_args does).
 */
void cfg_set_program(struct cfg *cfg, const char *prog);

/*
 * The secret a *_file key names (file_id), read now (a new string, free
 * it with secret_free): NULL with err naming the key if it cannot be
 * read or others may read it, NULL without error if the key is empty.
 */
char *cfg_secret(const struct cfg *cfg, enum cfg_id file_id, char *err,
		 size_t errlen);
/* The token the notifier and prophetctl send: http.token_file's, else
 * http.token ("" if none); free it with secret_free. */
char *cfg_http_token(const struct cfg *cfg, char *err, size_t errlen);
struct whsign;
/* notifier.callback_signing_key_file's keys into *ks (not if ks is
 * NULL: only checked): their count, 0 if the key is empty (callbacks
 * unsigned), -1 with err naming the key. */
int cfg_signing_keys(const struct cfg *cfg, struct whsign *ks, char *err,
		     size_t errlen);

/* Re-reads the file, with the --set arguments (cfg_set_arg) over it as at
 * start, and applies the keys marked reloadable. */
int cfg_reload(struct cfg *cfg, char *err, size_t errlen);

/* Writes an example file documenting every key with its default. */
void cfg_write_example(FILE *fp);

/*
 * The shared command line of every program: -c/--config, --set,
 * --check-config, --version, --help. Exits on --help, --version,
 * --check-config and on any error; returns the loaded config otherwise.
 * Arguments it does not know are left in argv (compacted), *argcp updated.
 */
struct cfg *cfg_from_args(int *argcp, char **argv, const char *prog,
			  const char *summary);

int cfg_check_zk_path(const char *v, char *err, size_t errlen);
int cfg_check_nonempty(const char *v, char *err, size_t errlen);
int cfg_check_redis_url(const char *v, char *err, size_t errlen);
int cfg_check_db_url(const char *v, char *err, size_t errlen);
int cfg_check_topic_prefix(const char *v, char *err, size_t errlen);
int cfg_check_listen(const char *v, char *err, size_t errlen);
/* empty, or host:port[,host:port...] */
int cfg_check_hostport_list(const char *v, char *err, size_t errlen);
int cfg_check_worker_id(const char *v, char *err, size_t errlen);
int cfg_check_level(const char *v, char *err, size_t errlen);
/* A task topic: 1-200 of [A-Za-z0-9._-], not "." or "..". */
int cfg_check_topic(const char *v, char *err, size_t errlen);
/* The same, or empty (an optional topic). */
int cfg_check_topic_or_empty(const char *v, char *err, size_t errlen);
/* Comma-separated topics (http.topics_allowed). */
int cfg_check_topic_list(const char *v, char *err, size_t errlen);
/* Comma-separated topics or "^" regular expressions (notifier.topics). */
int cfg_check_topics_or_regexes(const char *v, char *err, size_t errlen);
/* CIDRs separated by commas or spaces (common/netguard.h). */
int cfg_check_cidr_list(const char *v, char *err, size_t errlen);
/* "" or DISABLED, REQUIRED, VERIFY_CA, VERIFY_IDENTITY (any case). */
int cfg_check_tls_mode(const char *v, char *err, size_t errlen);
int cfg_check_kafka_protocol(const char *v, char *err, size_t errlen);
int cfg_check_sasl_mechanism(const char *v, char *err, size_t errlen);

#endif
