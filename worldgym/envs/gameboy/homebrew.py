"""The homebrew "sprite to goal" task ROM, assembled from source at run time (nothing binary is shipped)."""

from __future__ import annotations

from functools import lru_cache

from worldgym.envs.gameboy.rom_builder import build_rom

PLAYER_Y, PLAYER_X = 0xC000, 0xC001  # WRAM bytes holding the player's OAM position
GOAL_Y, GOAL_X = 0xC002, 0xC003
FRAME_COUNTER = 0xC004
START_POSITION = (40, 24)
GOAL_POSITION = (112, 136)

# Building blocks of small test and task ROMs. A program starts with BOOT_WITH_LCD_OFF (VBlank vector -> its
# ``vblank`` label; code at $150: interrupts off, stack set, LCD off once in VBlank, a = 0), so VRAM can be
# written freely; CLEAR_BG_MAP fills the background map at $9800 with tile 0.
BOOT_WITH_LCD_OFF = """.org $40
    jp vblank
.org $150
main:
    di
    ld sp, $FFFE
.wait_vblank:
    ldh a, ($44)
    cp 144
    jr c, .wait_vblank
    xor a
    ldh ($40), a
"""
CLEAR_BG_MAP = """    ld hl, $9800
    ld bc, $0400
.clear_map:
    xor a
    ld (hl+), a
    dec bc
    ld a, b
    or c
    jr nz, .clear_map
"""

SOURCE = f"""
{BOOT_WITH_LCD_OFF}    ld hl, $8000            ; tile 0 blank, tile 1 solid player, tile 2 ring goal
    ld b, 16
.blank:
    ld (hl+), a
    dec b
    jr nz, .blank
    ld de, tiles
    ld b, 32
.copy_tiles:
    ld a, (de)
    ld (hl+), a
    inc de
    dec b
    jr nz, .copy_tiles
{CLEAR_BG_MAP}    ld hl, $FE00
    ld b, 160
    xor a
.clear_oam:
    ld (hl+), a
    dec b
    jr nz, .clear_oam
    ld a, {START_POSITION[0]}
    ld ($C000), a
    ld a, {START_POSITION[1]}
    ld ($C001), a
    ld a, {GOAL_POSITION[0]}
    ld ($C002), a
    ld a, {GOAL_POSITION[1]}
    ld ($C003), a
    ld a, %11100100
    ldh ($47), a
    ldh ($48), a
    ld a, $01
    ldh ($FF), a
    xor a
    ldh ($0F), a
    ld a, $93
    ldh ($40), a
    ei
loop:
    halt
    nop
    jr loop

vblank:
    push af
    push bc
    ld a, ($C004)
    inc a
    ld ($C004), a
    ld a, $20
    ldh ($00), a
    ldh a, ($00)
    ldh a, ($00)
    cpl
    and $0F
    ld b, a
    ld a, ($C000)
    bit 2, b                ; up
    jr z, .no_up
    cp 17
    jr c, .no_up
    dec a
.no_up:
    bit 3, b                ; down
    jr z, .no_down
    cp 152
    jr nc, .no_down
    inc a
.no_down:
    ld ($C000), a
    ld ($FE00), a
    ld a, ($C001)
    bit 1, b                ; left
    jr z, .no_left
    cp 9
    jr c, .no_left
    dec a
.no_left:
    bit 0, b                ; right
    jr z, .no_right
    cp 160
    jr nc, .no_right
    inc a
.no_right:
    ld ($C001), a
    ld ($FE01), a
    ld a, 1
    ld ($FE02), a
    ld a, ($C002)
    ld ($FE04), a
    ld a, ($C003)
    ld ($FE05), a
    ld a, 2
    ld ($FE06), a
    ld a, $30
    ldh ($00), a
    pop bc
    pop af
    reti

tiles:
    db $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF, $FF
    db $3C, $3C, $42, $42, $81, $81, $81, $81, $81, $81, $81, $81, $42, $42, $3C, $3C
"""


@lru_cache(maxsize=1)
def sprite_goal_rom() -> bytes:
    """The assembled 32 KiB ROM of the sprite-to-goal game (d-pad moves a block one pixel per frame)."""
    return build_rom(SOURCE, title="SPRITEGOAL")
