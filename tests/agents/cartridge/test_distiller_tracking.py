"""The cartridge distiller's report_to: every metric of metrics.jsonl in TensorBoard's event files."""

from __future__ import annotations

from .conftest import make_trainer


def test_report_to_tensorboard_gets_every_metric(tmp_path, tokenizer, logged_to_tensorboard):
    trainer = make_trainer(tmp_path, tokenizer, num_steps=2, report_to="tensorboard")
    trainer.train()
    trainer.close()
    logged_to_tensorboard(trainer.output_dir)
