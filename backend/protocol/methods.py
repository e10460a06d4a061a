"""Method and push names of the broker's client surface."""

from typing import Final

PING: Final = "ping"
VERSION: Final = "version"
SHUTDOWN: Final = "shutdown"
STATUS: Final = "status"
LOG_SET_LEVEL: Final = "log/set-level"

COMPONENTS_SUBSCRIBE: Final = "components:subscribe"
COMPONENTS_UNSUBSCRIBE: Final = "components:unsubscribe"
COMPONENTS_RESTART: Final = "components:restart"

ERRORS_GET_INITIAL: Final = "errors:get-initial"
ERRORS_REPORT: Final = "errors:report"
ERRORS_CLEAR: Final = "errors:clear"

SETTINGS_GET: Final = "settings/get"
SETTINGS_SET: Final = "settings/set"

# Pushes (broker to client notifications).
APP_READY: Final = "app:ready"
COMPONENTS_EVENT: Final = "components:event"
ERRORS_UPDATE: Final = "errors:update"
SETTINGS_CHANGED: Final = "settings:changed"
