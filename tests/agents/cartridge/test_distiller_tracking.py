"""The cartridge distiller's report_to: every metric of metrics.jsonl in TensorBoard's event files, and a table of
every evaluation's questions."""

from __future__ import annotations

from worldgym.tracking import TENSORBOARD_DIR
from worldgym.transcripts import read_transcript

from .conftest import make_trainer


def test_report_to_tensorboard_gets_every_metric_and_the_evaluations_tables(tmp_path, tokenizer,
                                                                            logged_to_tensorboard):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trainer = make_trainer(tmp_path, tokenizer, num_steps=2, report_to="tensorboard")
    trainer.train()
    trainer.close()
    logged_to_tensorboard(trainer.output_dir)
    events = EventAccumulator(str(trainer.output_dir / TENSORBOARD_DIR), size_guidance={"tensors": 0})
    events.Reload()
    tables = {e.step: e.tensor_proto.string_val[0].decode() for e in events.Tensors("episodes/text_summary")}
    assert sorted(tables) == [0, 2]
    records = read_transcript(trainer.output_dir, 2)
    assert tables[2].count("\n") == 2 + len(records)  # header, rule, a row per question
