-- MariaDB/MySQL only: the cron keys' ordered head (see migrations/mysql/20261211000300_cron_key_head.sql).
SELECT 1;
