"""The window's commands and first-minute helpers, as a mixin of `MainWindow`.

Owns `WindowCommands`: the handlers of the declared actions (widgets/actions.py: play/pause,
step, next/previous request, send, *Copy to Compose*, the shortcuts list), which row actions
the selected request allows (*Re-run on…* off, with the reason as its tooltip, for a row that
cannot be re-run), the empty-state hint, where the window records (named in the status bar;
File → Open starts there) and the *Use free port N* offer when the server's port was taken.
Split from widgets/main_window.py to keep each module readable; it uses the window's widgets
and is not used alone. GUI thread only.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Qt, QUrl
from PySide6.QtGui import QDesktopServices

from inspector.tracks import Track
from widgets.first_steps import ShortcutsDialog, hint_html
from widgets.rerun_dialog import rerun_blocker


class WindowCommands:
    """Mixin: `MainWindow` provides the widgets these methods drive."""

    def _row_actions(self, track: Track | None) -> None:
        """What the selected row allows: Re-run on… and Copy to Compose need its request;
        when it has none, the action is off and its tooltip says why."""
        why = rerun_blocker(track, self.reruns.recording_of(track) if track else None)
        if self.reruns._start is None:
            why = "This window has no engine to re-run with"
        rerun = self.reruns.action
        rerun.setEnabled(why is None)
        rerun.setToolTip(why or "Send the selected request, or its whole recording, again "
                         "to another model, pack or upstream")
        compose = self.actions_by_name["to_compose"]
        has_request = track is not None and track.request is not None
        compose.setEnabled(has_request)
        compose.setToolTip("Put the selected request (messages, tools, sampling) in the "
                           "Compose tab to edit and send again" if has_request else
                           "The selected row holds no request (a text output, or none "
                           "selected)")

    def _play_pause(self) -> None:
        if self.playback is not None and self.playback.items:
            self.bar.play_btn.click()

    def _step(self) -> None:
        if self.playback is not None and self.playback.items:
            self.bar.step_btn.click()

    def go(self, delta: int) -> None:
        """Next (+1) / previous (-1) request: the playback's, while a recording is open;
        otherwise the newer / older row of the list."""
        if self.playback is not None and self.playback.items:
            (self.bar.next_btn if delta > 0 else self.bar.prev_btn).click()
            return
        model, current = self.log.model, self.log.current
        row = model.row_of(current) if current is not None else None
        target = model.track_at(0 if row is None else row - delta)  # newest first
        if target is not None:
            if row is not None and row - delta != 0:
                self.log.follow.setChecked(False)  # an older row: pinned, as a click does
            self.log.select(target)

    def _send_composed(self) -> None:
        self.tabs.setCurrentWidget(self.compose)
        self.compose.send()

    def to_compose(self) -> bool:
        """The selected request into the Compose tab, to edit and send again."""
        track = self.log.current
        if track is None or track.request is None:
            self.say("Select a request that holds one first", error=True)
            return False
        try:
            said = self.compose.load(track.request)
        except (TypeError, ValueError, KeyError) as e:
            self.say(f"Cannot copy {track.id} to Compose: {e}", error=True)
            return False
        self.tabs.setCurrentWidget(self.compose)
        self.say(f"{track.id} copied to Compose{said}: edit it, then Ctrl+Enter sends it")
        return True

    def show_shortcuts(self) -> ShortcutsDialog:
        log = self.log
        dialog = ShortcutsDialog(self, (log.find_action, log.next_anomaly_action,
                                        log.previous_anomaly_action))
        dialog.setAttribute(Qt.WidgetAttribute.WA_DeleteOnClose)
        dialog.open()
        return dialog

    def _hint_link(self, link: str) -> None:
        if link == "compose:":
            self.tabs.setCurrentWidget(self.compose)
            self.compose.message.setFocus()
        elif link == "open:":
            self.ask_open()

    def _update_hint(self) -> None:
        empty = self.log.model.rowCount() == 0
        if empty:
            self.hint.setText(hint_html(self.server_url, self.recordings_dir))
        self.body.setCurrentWidget(self.hint if empty else self.channels)


    def set_recordings(self, folder: Path | None, recording_to: Path | None) -> None:
        """Where recordings are (File → Open starts there) and this window's own file,
        which the status bar names."""
        self.recordings_dir, self.recording_to = folder, recording_to
        if recording_to is not None:
            self.record_label.setText(f"Recording to {recording_to.name}")
            self.record_label.setToolTip(f"Recording to {recording_to}")
        else:
            self.record_label.setText("not recording")
            self.record_label.setToolTip("Started with --no-record")
        where = folder or (recording_to.parent if recording_to else None)
        action = self.actions_by_name["recordings"]
        action.setEnabled(where is not None)
        action.setText(f"Show the &recordings folder ({where})" if where else
                       "Show the &recordings folder")
        self._update_hint()

    def show_recordings_folder(self) -> None:
        folder = self.recordings_dir
        if folder is not None:
            folder.mkdir(parents=True, exist_ok=True)
            QDesktopServices.openUrl(QUrl.fromLocalFile(str(folder)))

    def _start_dir(self) -> str:
        folder = self.recordings_dir
        return str(folder) if folder is not None and folder.is_dir() else ""

    def offer_port(self, port: int) -> None:
        """The port was taken: a button to start the server on a free one instead."""
        self._free_port = port
        self.port_btn.setText(f"Use free port {port}")
        self.port_btn.setToolTip(f"Start the server on 127.0.0.1:{port} (the Server button "
                                 "does the same)")
        self.port_btn.show()

    def _use_free_port(self) -> None:
        if self._free_port is not None:
            self.free_port_chosen.emit(self._free_port)
