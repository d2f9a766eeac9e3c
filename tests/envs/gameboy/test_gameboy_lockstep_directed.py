"""Directed lockstep tests against PyBoy: DAA, interrupts, timer, HALT/EI, mappers, PPU, OAM DMA."""

from __future__ import annotations

import pytest
from gameboy_programs import INTERRUPT_VECTORS

from worldgym.envs.gameboy.lockstep import SYNC_PROLOGUE, run_lockstep

pytest.importorskip("pyboy")

COUNTING_ISRS = """
vblank_isr:
    push af
    ld a, ($C000)
    inc a
    ld ($C000), a
    pop af
    reti
stat_isr:
    push af
    ld a, ($C001)
    inc a
    ld ($C001), a
    ldh a, ($44)
    ld ($C002), a
    pop af
    reti
timer_isr:
    push af
    ld a, ($C003)
    inc a
    ld ($C003), a
    ld a, b
    ld ($C004), a
    pop af
    reti
serial_isr:
    push af
    ld a, ($C005)
    inc a
    ld ($C005), a
    pop af
    reti
"""


def program(body: str) -> str:
    return INTERRUPT_VECTORS + COUNTING_ISRS + SYNC_PROLOGUE + "test_start:\n" + body


def test_daa_every_input_matches_pyboy(repro_dir) -> None:
    body = """
    ld hl, $C000
    ld d, 0
.daa_a:
    ld e, 0
.daa_f:
    push de
    pop af
    daa
    push af
    pop bc
    ld (hl), b
    inc hl
    ld (hl), c
    inc hl
    ld a, e
    add a, $10
    ld e, a
    cp $80
    jr nz, .daa_f
    inc d
    jr nz, .daa_a
daa_done:
    nop
.idle:
    jr .idle
"""
    run_lockstep(program(body), ["test_start", "daa_done"], repro_dir=repro_dir)


def test_timer_interrupts_halt_and_ei_delay_match_pyboy(repro_dir) -> None:
    body = """
    ld a, $F0
    ldh ($06), a
    ldh ($05), a
    ld a, $05
    ldh ($07), a
    ld a, $04
    ldh ($FF), a
    xor a
    ldh ($0F), a
    ei
    halt
    nop
first_wake:
    halt
    nop
second_wake:
    di
    ld a, $06
    ldh ($07), a
    xor a
    ldh ($0F), a
    halt
    nop
woke_without_ime:
    ld b, 0
    ld a, $04
    ldh ($0F), a
    ei
    inc b
    inc b
    inc b
ei_delay_done:
    di
    ld a, $04
    ldh ($07), a
    ld c, 0
.div_wait:
    ldh a, ($04)
    inc c
    cp $20
    jr c, .div_wait
    ld a, c
    ld ($C010), a
    ldh a, ($05)
    ld ($C011), a
timer_done:
    nop
.idle:
    jr .idle
"""
    labels = ["test_start", "first_wake", "second_wake", "woke_without_ime", "ei_delay_done", "timer_done"]
    run_lockstep(program(body), labels, repro_dir=repro_dir)


def test_vblank_and_stat_lyc_interrupts_match_pyboy(repro_dir) -> None:
    body = """
    ld a, 40
    ldh ($45), a
    ld a, $40
    ldh ($41), a
    ld a, $03
    ldh ($FF), a
    xor a
    ldh ($0F), a
    ld a, $91
    ldh ($40), a
    ei
.wait:
    ld a, ($C000)
    cp 5
    jr c, .wait
    di
    ld hl, $DFE0
    xor a
.clear_stack:
    ld (hl+), a
    bit 4, l
    jr z, .clear_stack
interrupts_done:
    nop
.idle:
    jr .idle
"""
    run_lockstep(program(body), ["test_start", "interrupts_done"], compare_cycles=False, repro_dir=repro_dir)


@pytest.mark.parametrize("stat_enable", [0x08, 0x10, 0x20], ids=["hblank", "vblank", "oam"])
def test_stat_mode_interrupt_counts_over_frames_match_pyboy(stat_enable: int, repro_dir) -> None:
    # PyBoy's sub-line mode timing is not exact, so only whole-frame interrupt counts are compared.
    body = f"""
    ld a, 77
    ldh ($45), a
    ld a, ${stat_enable:02X}
    ldh ($41), a
    ld a, $03
    ldh ($FF), a
    xor a
    ldh ($0F), a
    ld a, $91
    ldh ($40), a
    ei
.wait:
    ld a, ($C000)
    cp 4
    jr c, .wait
    di
    xor a
    ld ($C002), a
    ld hl, $DFE0
.clear_stack:
    ld (hl+), a
    bit 4, l
    jr z, .clear_stack
stat_done:
    nop
.idle:
    jr .idle
"""
    result = run_lockstep(
        program(body), ["test_start", "stat_done"], compare_cycles=False, repro_dir=repro_dir
    )
    assert result.warp["stat_done"].wram[1] > 0  # the STAT handler ran


def _bank_markers(banks: int) -> str:
    return "".join(f".bank {n}\n    db {n}, {n ^ 0xFF}\n" for n in range(1, banks))


@pytest.mark.parametrize(
    ("cartridge_type", "bank_mode_write"),
    [(0x03, "ld a, 1\n    ld ($6000), a"), (0x13, "nop"), (0x1B, "nop")],
    ids=["mbc1", "mbc3", "mbc5"],
)
def test_rom_and_ram_banking_match_pyboy(cartridge_type: int, bank_mode_write: str, repro_dir) -> None:
    body = f"""
    ld hl, $C000
    ld b, 0
.rom_loop:
    ld a, b
    ld ($2000), a
    ld a, ($4000)
    ld (hl+), a
    ld a, ($4001)
    ld (hl+), a
    inc b
    ld a, b
    cp 8
    jr nz, .rom_loop
    ld a, $0A
    ld ($0000), a
    {bank_mode_write}
    ld b, 0
.ram_write:
    ld a, b
    ld ($4000), a
    add a, $10
    ld ($A000), a
    ld ($BFFF), a
    inc b
    ld a, b
    cp 4
    jr nz, .ram_write
    ld b, 0
    ld hl, $C020
.ram_read:
    ld a, b
    ld ($4000), a
    ld a, ($A000)
    ld (hl+), a
    ld a, ($BFFF)
    ld (hl+), a
    inc b
    ld a, b
    cp 4
    jr nz, .ram_read
    xor a
    ld ($0000), a
    ld a, ($A000)
    ld ($C030), a
banking_done:
    nop
.idle:
    jr .idle
{_bank_markers(8)}
"""
    run_lockstep(program(body), ["test_start", "banking_done"], repro_dir=repro_dir, cartridge_type=cartridge_type,
                 rom_banks=8, ram_size_code=0x03)  # fmt: skip


PPU_SETUP = """
    ld hl, $8000
    ld de, tiles
    ld bc, tiles_end - tiles
.copy_tiles:
    ld a, (de)
    ld (hl+), a
    inc de
    dec bc
    ld a, b
    or c
    jr nz, .copy_tiles
    ld hl, $9800
    ld bc, $0800
.fill_maps:
    ld a, l
    and 3
    ld (hl+), a
    dec bc
    ld a, b
    or c
    jr nz, .fill_maps
    ld hl, $C100
    ld de, sprites
    ld b, sprites_end - sprites
.copy_sprites:
    ld a, (de)
    ld (hl+), a
    inc de
    dec b
    jr nz, .copy_sprites
    ld hl, $FF80
    ld de, dma_routine
    ld b, dma_routine_end - dma_routine
.copy_dma:
    ld a, (de)
    ld (hl+), a
    inc de
    dec b
    jr nz, .copy_dma
    ld a, $C1
    call $FF80
    ld a, %11100100
    ldh ($47), a
    ld a, %00011011
    ldh ($48), a
    ld a, %11010000
    ldh ($49), a
    ld a, 5
    ldh ($42), a
    ld a, 3
    ldh ($43), a
    ld a, 96
    ldh ($4A), a
    ld a, 87
    ldh ($4B), a
"""
PPU_DATA = """
dma_routine:
    ldh ($46), a
    ld a, 40
.dma_wait:
    dec a
    jr nz, .dma_wait
    ret
dma_routine_end:
tiles:
    ds 16, 0
    db $FF, $00, $81, $00, $BD, $FF, $A5, $C3, $A5, $C3, $BD, $FF, $81, $00, $FF, $00
    db $AA, $55, $55, $AA, $AA, $55, $55, $AA, $AA, $55, $55, $AA, $AA, $55, $55, $AA
    db $F0, $0F, $F0, $0F, $F0, $0F, $F0, $0F, $0F, $F0, $0F, $F0, $0F, $F0, $0F, $F0
    db $18, $18, $3C, $3C, $7E, $66, $FF, $C3, $FF, $81, $7E, $42, $3C, $24, $18, $18
    db $01, $80, $03, $C0, $07, $E0, $0F, $F0, $1F, $F8, $3F, $FC, $7F, $FE, $FF, $FF
tiles_end:
sprites:
    db 30, 20, 4, $00
    db 34, 24, 5, $20
    db 50, 60, 5, $40
    db 50, 64, 4, $90
    db 70, 100, 4, $60
    db 90, 14, 5, $80
    db 120, 150, 4, $30
sprites_end:
"""


@pytest.mark.parametrize("lcdc", [0xE3, 0xF7, 0x83], ids=["bg-window-8x8", "tall-sprites-9c00", "no-window"])
def test_screen_matches_pyboy(lcdc: int, repro_dir) -> None:
    body = (
        PPU_SETUP
        + f"""
    ld a, ${lcdc:02X}
    ldh ($40), a
screen_ready:
    nop
.idle:
    jr .idle
"""
        + PPU_DATA
    )
    run_lockstep(program(body), ["test_start", "screen_ready"], screen_frames=3, repro_dir=repro_dir)
