-- Runs once, when the data directory is first initialised (docker-entrypoint-initdb.d).
-- A user with the rights a binlog reader needs, plus the dblog database for the watermark table.
-- See docs/sources/mysql.md for the rights the MySQL connector checks at start.

CREATE DATABASE IF NOT EXISTS dblog;

CREATE USER IF NOT EXISTS 'dblog'@'%' IDENTIFIED BY 'dblog';
GRANT SELECT, REPLICATION SLAVE, REPLICATION CLIENT ON *.* TO 'dblog'@'%';
GRANT ALL PRIVILEGES ON dblog.* TO 'dblog'@'%';
FLUSH PRIVILEGES;
