"""The database: its engine and sessions, the tables, the migrations run, the SQLite write lane."""
