"""The database: its connection pool, sessions, tables, migrations, and the SQLite write lane."""
