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

ENGINE_GET_INSTALLED: Final = "engine:get-installed"
ENGINE_STATUS: Final = "engine:status"
ENGINE_INSTALL: Final = "engine:install"
ENGINE_UNINSTALL: Final = "engine:uninstall"
ENGINE_START: Final = "engine:start"
ENGINE_STOP: Final = "engine:stop"
ENGINE_RESTART: Final = "engine:restart"
ENGINE_SET_PORT: Final = "engine:set-port"
ENGINE_ACTION: Final = "engine:action"
ENGINE_MODELS: Final = "engine:models"
ENGINE_LOGS: Final = "engine:logs"
ENGINE_PREPARE_SHUTDOWN: Final = "engine:prepare-shutdown"

NODEINFO_GET: Final = "nodeinfo:get"

# Pushes (broker to client notifications).
APP_READY: Final = "app:ready"
COMPONENTS_EVENT: Final = "components:event"
ERRORS_UPDATE: Final = "errors:update"
SETTINGS_CHANGED: Final = "settings:changed"
ENGINE_STATE_CHANGED: Final = "engine:state-changed"
ENGINE_MODELS_CHANGED: Final = "engine:models-changed"
ENGINE_PULL_PROGRESS: Final = "engine:pull-progress"
ENGINE_INSTALL_PROGRESS: Final = "engine:install-progress"

# Discovery: found and manual nodes.
DISCOVERY_GET_NODES: Final = "discovery:get-nodes"
DISCOVERY_SUBSCRIBE: Final = "discovery:subscribe"
DISCOVERY_UNSUBSCRIBE: Final = "discovery:unsubscribe"
DISCOVERY_EVENT: Final = "discovery:event"
NODE_ADD: Final = "node/add"
NODE_REMOVE: Final = "node/remove"
NODES_LIST: Final = "nodes/list"

# Jobs (workloads) seen by this node's front doors.
WORKLOADS_GET_INITIAL: Final = "workloads:get-initial"
WORKLOADS_SUBSCRIBE: Final = "workloads:subscribe"
WORKLOADS_UNSUBSCRIBE: Final = "workloads:unsubscribe"
WORKLOADS_CLEAR: Final = "workloads:clear"
WORKLOADS_EVENT: Final = "workloads:event"
