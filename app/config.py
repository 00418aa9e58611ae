"""Settings, read once from `SPECDEC_*` environment variables."""

from functools import lru_cache

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Every setting of the service; the README lists them with their defaults."""

    model_config = SettingsConfigDict(env_prefix="SPECDEC_", extra="ignore")

    database_url: str = Field(
        default="sqlite:///./data/specdec.db",
        description="SQLAlchemy URL of the store; SQLite files get their folder created.",
    )
    scrape_timeout_s: float = Field(
        default=5.0, gt=0, le=300, description="Timeout of one /metrics scrape (connect + read)."
    )
    max_metrics_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        description="Largest /metrics answer read, counted after gzip decoding.",
    )
    sample_retention_days: float = Field(
        default=30,
        gt=0,
        description="Samples of windows closed longer ago than this are deleted (results stay).",
    )
    log_level: str = Field(default="info", description="Log level of the service.")


@lru_cache
def get_settings() -> Settings:
    """The process-wide settings (cached; tests build their own `Settings`)."""
    return Settings()
