"""The Playground page: pick any model of the cluster, write a message, and read the answer as
it streams from this computer's front door, with who served it, time to first token and
tokens/s, the request as code, and the check of every engine."""

from __future__ import annotations

from PySide6.QtGui import QKeySequence, QShortcut
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLineEdit,
    QPlainTextEdit,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.controllers.inference_check import InferenceCheckController
from app.controllers.playground import PlaygroundController
from app.controllers.playground_stream import ChatResult
from app.controllers.playground_wire import API_TITLES, ApiName, ChatRequest
from app.window.inference_check import InferenceCheckBox
from app.window.playground_answer import AnswerBox, SnippetBox, empty_note
from app.window.widgets import PAGE_MARGINS, page_title

DEFAULT_TEMPERATURE = 0.7
DEFAULT_MAX_TOKENS = 512
MAX_TOKENS_LIMIT = 131_072
DEFAULT_MESSAGE = "Write a haiku about routers."


def parse_stop(text: str) -> tuple[str, ...]:
    """Stop sequences from the field: comma-separated, ``\\n`` for a line break."""
    parts = (part.strip().replace("\\n", "\n") for part in text.split(","))
    return tuple(part for part in parts if part)


class RequestForm(QGroupBox):
    """The model, the API, the prompts and the sampling settings; Send and Stop."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Request", parent)
        self.model_combo = QComboBox()
        self.model_combo.setSizeAdjustPolicy(
            QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon
        )
        self.model_combo.setMinimumContentsLength(16)
        # As wide as the fields below it: "deepseek-r1:32b  (gpu-box)" reads whole.
        self.model_combo.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.api_combo = QComboBox()
        for api, title in API_TITLES.items():
            self.api_combo.addItem(title, api)
        self.api_combo.setToolTip("Every front door speaks all three APIs and reaches every model.")
        self.system_field = QPlainTextEdit()
        self.system_field.setPlaceholderText("Optional: how the model should behave")
        self.system_field.setFixedHeight(self.system_field.fontMetrics().lineSpacing() * 3 + 12)
        self.message_field = QPlainTextEdit(DEFAULT_MESSAGE)
        self.temperature_box = QDoubleSpinBox()
        self.temperature_box.setRange(0.0, 2.0)
        self.temperature_box.setSingleStep(0.1)
        self.temperature_box.setValue(DEFAULT_TEMPERATURE)
        self.max_tokens_box = QSpinBox()
        self.max_tokens_box.setRange(0, MAX_TOKENS_LIMIT)
        self.max_tokens_box.setSpecialValueText("Engine's default")
        self.max_tokens_box.setValue(DEFAULT_MAX_TOKENS)
        self.stop_field = QLineEdit()
        self.stop_field.setPlaceholderText("Comma-separated, \\n for a line break")
        self.send_button = QPushButton("Send")
        self.send_button.setDefault(True)
        self.send_button.setToolTip("Send the message (Ctrl+Enter)")
        self.stop_button = QPushButton("Stop")
        self.stop_button.setEnabled(False)
        self.empty_note = empty_note()
        form = QFormLayout(self)
        form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.ExpandingFieldsGrow)
        form.addRow("Model", self.model_combo)
        form.addRow("", self.empty_note)
        form.addRow("API", self.api_combo)
        form.addRow("System prompt", self.system_field)
        form.addRow("Message", self.message_field)
        form.addRow("Temperature", self.temperature_box)
        form.addRow("Max tokens", self.max_tokens_box)
        form.addRow("Stop sequences", self.stop_field)
        buttons = QHBoxLayout()
        buttons.addStretch(1)
        buttons.addWidget(self.stop_button)
        buttons.addWidget(self.send_button)
        form.addRow(buttons)

    def request(self, door_url: str | None) -> ChatRequest | None:
        """The request as set up now (None without a door or a model)."""
        model = self.model_combo.currentData()
        if door_url is None or not isinstance(model, str):
            return None
        api: ApiName = self.api_combo.currentData()
        max_tokens = self.max_tokens_box.value()
        return ChatRequest(
            api=api,
            door_url=door_url,
            model=model,
            user=self.message_field.toPlainText(),
            system=self.system_field.toPlainText().strip(),
            temperature=self.temperature_box.value(),
            max_tokens=max_tokens or None,
            stop=parse_stop(self.stop_field.text()),
        )


class PlaygroundPage(QWidget):
    """Try any model of the cluster; the inference check of every engine below."""

    def __init__(
        self,
        controller: PlaygroundController,
        check: InferenceCheckController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._controller = controller
        self._wanted_model: str | None = None  # picked once the cluster lists it
        self.form = RequestForm()
        self.answer = AnswerBox()
        self.snippets = SnippetBox()
        self.check_box = InferenceCheckBox(check)
        self._lay_out()
        form = self.form
        form.send_button.clicked.connect(self.send)
        form.stop_button.clicked.connect(controller.stop)
        for shortcut in ("Ctrl+Return", "Ctrl+Enter"):
            QShortcut(QKeySequence(shortcut), self, self.send)
        for combo in (form.model_combo, form.api_combo):
            combo.currentIndexChanged.connect(self._show_request)
        for field in (form.system_field, form.message_field):
            field.textChanged.connect(self._show_request)
        form.temperature_box.valueChanged.connect(self._show_request)
        form.max_tokens_box.valueChanged.connect(self._show_request)
        form.stop_field.textChanged.connect(self._show_request)
        controller.choices_changed.connect(self._fill_models)
        controller.door_changed.connect(self._show_request)
        controller.answer_started.connect(self._on_controller_answer_started)
        controller.text_arrived.connect(self.answer.append)
        controller.answer_ended.connect(self._on_controller_answer_ended)
        self._fill_models()

    def select_model(self, name: str) -> None:
        """Pick ``name`` in the model list, now or as soon as the cluster lists it."""
        self._wanted_model = name
        self._fill_models()

    def send(self) -> None:
        """Send the request as set up (nothing without a model or a door)."""
        request = self.form.request(self._controller.door_url)
        if request is None:
            self.answer.error.setText("Pick a model first; the service must be running.")
            return
        self._controller.send(request)

    def _lay_out(self) -> None:
        columns = QHBoxLayout()
        columns.addWidget(self.form, 2)
        right = QVBoxLayout()
        right.addWidget(self.answer, 1)
        right.addWidget(self.snippets)
        columns.addLayout(right, 3)
        content = QWidget()
        inner = QVBoxLayout(content)
        inner.setContentsMargins(0, 0, 0, 0)
        inner.addLayout(columns, 1)
        inner.addWidget(self.check_box)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        scroll.setWidget(content)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(*PAGE_MARGINS)
        layout.addWidget(page_title("Playground"))
        layout.addWidget(scroll, 1)

    def _fill_models(self) -> None:
        combo = self.form.model_combo
        current = combo.currentData()
        combo.blockSignals(True)
        combo.clear()
        for choice in self._controller.choices:
            combo.addItem(choice.label, choice.name)
        wanted = combo.findData(self._wanted_model) if self._wanted_model else -1
        index = wanted if wanted >= 0 else combo.findData(current) if current is not None else -1
        combo.setCurrentIndex(index if index >= 0 else 0 if combo.count() else -1)
        if wanted >= 0:
            self._wanted_model = None
        combo.blockSignals(False)
        self.form.empty_note.setVisible(combo.count() == 0)
        self._show_request()

    def _show_request(self, *_args: object) -> None:
        request = self.form.request(self._controller.door_url)
        self.snippets.show_request(request)
        self.form.send_button.setEnabled(request is not None)

    def _on_controller_answer_started(self, request: ChatRequest) -> None:
        self.snippets.show_request(request)
        self.answer.started()
        self.form.stop_button.setEnabled(True)

    def _on_controller_answer_ended(self, result: ChatResult) -> None:
        self.form.stop_button.setEnabled(False)
        self.answer.ended(result, self._controller.computer_name(result.served_by))
