"""Pokémon Red tasks (ExitOak, StandingStill) run for real on a homebrew stand-in for the Pokémon ROM.

The stand-in writes the RAM bytes the tasks read at the addresses of the public pret/pokered disassembly
(wCurMap = $D35E, wYCoord = $D361, wXCoord = $D362, OAKS_LAB = $28) and draws a screen that approaches a known
goal image: each new press of "down" walks one tile row toward the lab's door and paints that row black, "up"
walks back and clears it, and the row ``EXIT_ROW`` is the door, where wCurMap becomes Pallet Town ($00).
"""

from __future__ import annotations

import numpy as np
import pytest

from worldgym.envs.gameboy.homebrew import BOOT_WITH_LCD_OFF, CLEAR_BG_MAP
from worldgym.envs.gameboy.rom_builder import build_rom
from worldgym.envs.gameboy.tasks import (
    ACTIONS,
    OAKS_LAB_MAP,
    POKEMON_CURRENT_MAP,
    POKEMON_PLAYER_X,
    POKEMON_PLAYER_Y,
    ExitOakTask,
    StandingStillTask,
    unpack_shades,
)
from worldgym.envs.gameboy.vector_env import GameBoyVecEnv

NOOP, DOWN, UP = ACTIONS.index("noop"), ACTIONS.index("down"), ACTIONS.index("up")
EXIT_ROW = 3  # tile rows walked to reach the door
ROW_PROGRESS = 4 / 72  # one painted tile row = 4 of the 72 observation rows, all 3 shades off the goal


def fake_lab_source(start_map: int) -> str:
    """SM83 source of the stand-in; ``start_map`` is the wCurMap value it boots into."""
    return f"""
CUR_MAP equ $D35E
Y_COORD equ $D361
X_COORD equ $D362
PREV_PAD equ $C000
{BOOT_WITH_LCD_OFF}    ld hl, $8000            ; tile 0 white, tile 1 black
    ld b, 16
.white:
    ld (hl+), a
    dec b
    jr nz, .white
    ld a, $FF
    ld b, 16
.black:
    ld (hl+), a
    dec b
    jr nz, .black
{CLEAR_BG_MAP}    ld a, {start_map}
    ld (CUR_MAP), a
    xor a
    ld (Y_COORD), a
    ld (PREV_PAD), a
    ld a, 5
    ld (X_COORD), a
    ld a, %11100100
    ldh ($47), a
    ld a, $01
    ldh ($FF), a
    xor a
    ldh ($0F), a
    ld a, $91
    ldh ($40), a
    ei
loop:
    halt
    nop
    jr loop

vblank:
    push af
    push bc
    push de
    push hl
    ld a, $20
    ldh ($00), a
    ldh a, ($00)
    ldh a, ($00)
    cpl
    and $0F
    ld b, a                 ; d-pad now: bit 3 down, bit 2 up
    ld a, (PREV_PAD)
    cpl
    and b
    ld c, a                 ; newly pressed
    ld a, b
    ld (PREV_PAD), a
    ld a, $30
    ldh ($00), a
    bit 3, c
    jr z, .no_down
    ld a, (Y_COORD)
    cp 18
    jr nc, .no_down
    call row_address
    ld a, 1
    call fill_row
    ld a, (Y_COORD)
    inc a
    ld (Y_COORD), a
    cp {EXIT_ROW}
    jr nz, .no_down
    xor a
    ld (CUR_MAP), a         ; through the door: Pallet Town
.no_down:
    bit 2, c
    jr z, .done
    ld a, (Y_COORD)
    or a
    jr z, .done
    dec a
    ld (Y_COORD), a
    call row_address
    xor a
    call fill_row
.done:
    pop hl
    pop de
    pop bc
    pop af
    reti

row_address:                ; hl = $9800 + 32 * a
    ld l, a
    ld h, 0
    add hl, hl
    add hl, hl
    add hl, hl
    add hl, hl
    add hl, hl
    ld de, $9800
    add hl, de
    ret

fill_row:                   ; 20 tiles of a from hl
    ld b, 20
.fill:
    ld (hl+), a
    dec b
    jr nz, .fill
    ret
"""


def goal_image() -> np.ndarray:
    """The screen at the door: the first EXIT_ROW tile rows black, the rest white."""
    goal = np.zeros((72, 80), dtype=np.uint8)
    goal[: 4 * EXIT_ROW] = 3
    return goal


@pytest.fixture(scope="module")
def lab_rom(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("roms") / "fake_lab.gb"
    path.write_bytes(build_rom(fake_lab_source(OAKS_LAB_MAP), title="FAKELAB", cartridge_type=0x13,
                               ram_size_code=0x03))  # fmt: skip  (MBC3+RAM+BATTERY, as Pokémon Red)
    return str(path)


@pytest.fixture(scope="module")
def title_rom(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("roms") / "title.gb"
    path.write_bytes(build_rom(fake_lab_source(0x00), title="TITLE"))
    return str(path)


def _env(rom: str, task, num_envs: int = 1, **settings) -> GameBoyVecEnv:
    return GameBoyVecEnv(num_envs=num_envs, rom_path=rom, task=task, **settings)


def test_task_reads_the_pret_pokered_addresses() -> None:
    pret_pokered = (0xD35E, 0xD361, 0xD362, 0x28)  # wCurMap, wYCoord, wXCoord, OAKS_LAB
    assert (POKEMON_CURRENT_MAP, POKEMON_PLAYER_Y, POKEMON_PLAYER_X, OAKS_LAB_MAP) == pret_pokered
    assert ExitOakTask().ram_addresses == (0xD35E,)


def test_exit_oak_step_penalty_progress_success_and_autoreset(lab_rom: str) -> None:
    env = _env(lab_rom, ExitOakTask(goal_image=goal_image()))
    start, _ = env.reset(seed=0)
    assert not start.any()  # white screen, in the lab
    _, reward, terminated, truncated, _ = env.step(np.array([NOOP]))
    assert reward[0] == pytest.approx(-0.01) and not terminated[0] and not truncated[0]
    _, reward, *_ = env.step(np.array([DOWN]))  # one row closer to the goal image
    assert reward[0] == pytest.approx(-0.01 + ROW_PROGRESS, abs=1e-6)
    _, reward, *_ = env.step(np.array([UP]))  # and back: the progress term is negative
    assert reward[0] == pytest.approx(-0.01 - ROW_PROGRESS, abs=1e-6)
    memory = env.emulator.memory(0)
    assert memory[0xD361 - 0x8000] == 0 and memory[0xD35E - 0x8000] == OAKS_LAB_MAP
    walk = [env.step(np.array([DOWN])) for _ in range(EXIT_ROW)]
    assert [result[2][0] for result in walk] == [False] * (EXIT_ROW - 1) + [True]  # terminated at the door
    _, reward, terminated, truncated, info = walk[-1]
    assert reward[0] == pytest.approx(-0.01 + ROW_PROGRESS + 10.0, abs=1e-5) and not truncated[0]
    assert np.array_equal(info["final_obs"][0], goal_image()) and info["_final_obs"][0]
    assert env._steps[0] == 0  # reset in the same step
    assert env.emulator.memory(0)[0xD35E - 0x8000] == OAKS_LAB_MAP
    after, reward, terminated, *_ = env.step(np.array([NOOP]))
    assert not after.any() and reward[0] == pytest.approx(-0.01) and not terminated[0]


def test_exit_oak_truncates_at_128_steps_and_resets(lab_rom: str) -> None:
    env = _env(lab_rom, ExitOakTask(goal_image=goal_image()), num_envs=2)
    env.reset(seed=0)
    for step in range(1, 129):
        actions = np.array([DOWN if step == 1 else NOOP, NOOP])
        _, reward, terminated, truncated, info = env.step(actions)
        assert not terminated.any()
        assert truncated.tolist() == [step == 128] * 2, f"step {step}"
        if step > 1:
            assert reward.tolist() == pytest.approx([-0.01, -0.01])
    assert info["_final_obs"].all() and info["final_obs"][0, :4].all() and not info["final_obs"][1].any()
    assert env._steps.tolist() == [0, 0]
    assert env.emulator.memory(0)[0xD361 - 0x8000] == 0  # env 0's walked row is undone by the reset


def test_exit_oak_never_succeeds_without_starting_in_the_lab(title_rom: str) -> None:
    # wCurMap reads 0 (e.g. a title screen or an outdoor start state): leaving the lab cannot have happened.
    env = _env(title_rom, ExitOakTask(goal_image=goal_image()))
    env.reset(seed=0)
    for action in [NOOP] + [DOWN] * (EXIT_ROW + 1):
        _, reward, terminated, truncated, _ = env.step(np.array([action]))
        assert not terminated[0] and not truncated[0] and reward[0] < 1.0


def test_exit_oak_rewards_are_the_same_with_packed_observations(lab_rom: str) -> None:
    actions = [DOWN, NOOP, UP, DOWN, DOWN, DOWN]
    runs = []
    for packed in (False, True):
        env = _env(lab_rom, ExitOakTask(goal_image=goal_image()), packed_obs=packed)
        env.reset(seed=0)
        runs.append([env.step(np.array([a]))[1:3] for a in actions])
    for (unpacked_reward, unpacked_done), (packed_reward, packed_done) in zip(*runs, strict=True):
        assert packed_reward.tolist() == unpacked_reward.tolist()
        assert packed_done.tolist() == unpacked_done.tolist()
    assert runs[1][-1][1][0]


def test_exit_oak_state_survives_save_and_load(lab_rom: str, tmp_path) -> None:
    env = _env(lab_rom, ExitOakTask(goal_image=goal_image()), num_envs=2)
    env.reset(seed=0)
    env.step(np.array([DOWN, NOOP]))
    env.step(np.array([DOWN, DOWN]))
    env.save_state(tmp_path / "state.npz")
    plan = [np.array([DOWN, UP]), np.array([NOOP, DOWN]), np.array([DOWN, DOWN])]
    expected = [env.step(a)[1:4] for a in plan]
    assert expected[0][1].tolist() == [True, False]  # env 0 reaches the door
    resumed = _env(lab_rom, ExitOakTask(goal_image=goal_image()), num_envs=2)
    resumed.load_state(tmp_path / "state.npz")
    for action, want in zip(plan, expected, strict=True):
        for got, value in zip(resumed.step(action)[1:4], want, strict=True):
            assert np.array_equal(got, value)


def test_exit_oak_state_dict_round_trips_every_field() -> None:
    task = ExitOakTask(goal_image=goal_image())
    memory = np.zeros((2, 0x8000), dtype=np.uint8)
    memory[:, 0xD35E - 0x8000] = OAKS_LAB_MAP
    task.on_reset(memory, np.ones(2, dtype=bool), np.random.default_rng(0))
    task.evaluate(memory, np.zeros((2, 72, 80), dtype=np.uint8))
    state = task.state_dict()
    assert set(state) == {"difference", "fresh", "in_lab"}
    copy = ExitOakTask(goal_image=goal_image())
    copy.load_state_dict(state)
    memory[1, 0xD35E - 0x8000] = 0x00  # env 1 walks out
    observations = np.broadcast_to(goal_image(), (2, 72, 80)).copy()
    want, want_done = task.evaluate(memory, observations)
    got, got_done = copy.evaluate(memory, observations)
    assert got.tolist() == want.tolist() and got_done.tolist() == want_done.tolist() == [False, True]
    assert want[1] == pytest.approx(-0.01 + 4 * EXIT_ROW / 72 + 10.0, abs=1e-5)


def test_goal_image_loads_from_a_npy_file(tmp_path) -> None:
    np.save(tmp_path / "goal.npy", goal_image())
    task = ExitOakTask(goal_image=tmp_path / "goal.npy")
    assert task.goal_image.dtype == np.uint8 and np.array_equal(task.goal_image, goal_image())


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"goal_image": np.zeros((144, 160), dtype=np.uint8)}, r"shape \(144, 160\).*\(72, 80\)"),
        ({"goal_image": np.full((72, 80), 4, dtype=np.uint8)}, "goal_image=.*shades 0 .* to 3"),
        ({"goal_image": np.full((72, 80), 0.5)}, "goal_image=.*float64"),
        ({"goal_image": "missing_goal.npy"}, "goal_image='missing_goal.npy'.*existing .npy"),
        ({"max_steps": 0}, "max_steps=0"),
        ({"progress_scale": float("nan")}, "progress_scale=nan"),
    ],
)
def test_exit_oak_rejects_bad_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExitOakTask(**kwargs)


def test_unpack_shades_inverts_the_env_packing(lab_rom: str) -> None:
    plain, packed = (_env(lab_rom, "standing_still", packed_obs=p) for p in (False, True))
    for env in (plain, packed):
        env.reset(seed=0)
    plain_obs = plain.step(np.array([DOWN]))[0]
    packed_obs = packed.step(np.array([DOWN]))[0]
    assert plain_obs.any() and np.array_equal(unpack_shades(packed_obs), plain_obs)


# ------------------------------------------------------------------------------------------ StandingStill


def test_standing_still_gives_zero_reward_a_static_screen_and_truncates_at_128(lab_rom: str) -> None:
    task = StandingStillTask()
    env = _env(lab_rom, task, num_envs=2)
    first, _ = env.reset(seed=0)
    for step in range(1, 129):
        obs, reward, terminated, truncated, info = env.step(np.full(2, task.fixed_action))
        assert reward.tolist() == [0.0, 0.0] and not terminated.any()
        assert truncated.tolist() == [step == 128] * 2
        assert np.array_equal(obs, first)  # the constant no-op leaves the picture unchanged
    assert np.array_equal(info["final_obs"], first) and env._steps.tolist() == [0, 0]


def test_standing_still_reward_ignores_ram_and_screen_changes(lab_rom: str) -> None:
    env = _env(lab_rom, StandingStillTask(max_steps=10))
    env.reset(seed=0)
    results = [env.step(np.array([DOWN])) for _ in range(EXIT_ROW)]
    assert env.emulator.memory(0)[0xD35E - 0x8000] == 0x00 and results[-1][0].any()  # left the "lab"
    assert all(r[1][0] == 0.0 and not r[2][0] and not r[3][0] for r in results)


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"fixed_action": 9}, "fixed_action=9"), ({"max_steps": -1}, "max_steps=-1")]
)
def test_standing_still_rejects_bad_settings(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        StandingStillTask(**kwargs)


def test_the_first_step_after_an_auto_reset_earns_progress_like_after_reset(lab_rom: str) -> None:
    env = _env(lab_rom, ExitOakTask(goal_image=goal_image()))
    env.reset(seed=0)
    after_reset = env.step(np.array([DOWN]))[1]
    for _ in range(EXIT_ROW - 1):
        env.step(np.array([DOWN]))  # the last one reaches the door and auto-resets
    after_auto_reset = env.step(np.array([DOWN]))[1]
    assert after_auto_reset[0] == pytest.approx(after_reset[0])
