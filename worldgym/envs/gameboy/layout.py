"""Layout of the per-emulator state arrays shared by the Warp kernels and the Python host code."""

from __future__ import annotations

# Column indices of the int32 state array ``st[env, column]``. Registers 0-7 follow the SM83 r8 encoding
# (B C D E H L (HL) A) with F stored in the (HL) slot, so ``st[env, r]`` reads register r directly.
REG_B, REG_C, REG_D, REG_E, REG_H, REG_L, REG_F, REG_A = range(8)
SP, PC, IME, HALTED, EI_PENDING, DIV_COUNTER, DOT, LINE = range(8, 16)
ROM_BANK, RAM_BANK, RAM_ENABLE, BANK_MODE, MAPPER, BUTTONS, WINDOW_LINE, STAT_LINE = range(16, 24)
SERIAL_CYCLES, SERIAL_COUNT, FRAME_FLAG, ROM_BANKS, RAM_SIZE, BREAK_HIT, ROM_BANK_LOW = range(24, 31)
DIV_RESET = 31  # set by a DIV write, which lands 8 T-cycles before the end of the writing instruction
TIMA_IRQ = 42  # T-cycles until a TIMA overflow raises its interrupt (0: none pending)
PENDING_CYCLES = 43  # T-cycles run in the current batch that the timer/serial/PPU have not caught up with yet
SYNC_FLAG = 44  # set when an instruction touched an IO register: the batch ends after that instruction
CHECK_IRQ = 45  # 1 while the current batch must check for interrupts before every instruction
WRITE_QUEUE = 46  # 46-47: the instruction's mapper/IO register writes (addr | value << 16 | 1 << 24)
SPRITE_SLOTS = 32  # columns 32-41 hold the OAM indices of the (at most 10) sprites on the current line
STATE_COLUMNS = 48

MEM_BASE = 0x8000  # mem[env, addr - MEM_BASE] covers 0x8000-0xFFFF (VRAM, WRAM, OAM, IO, HRAM, IE)
MEM_SIZE = 0x8000
SCREEN_H, SCREEN_W = 144, 160
SERIAL_BUFFER = 256
CYCLES_PER_FRAME = 70224

# DMG register values after the boot ROM hands over at 0x0100.
POST_BOOT_REGISTERS = {REG_A: 0x01, REG_F: 0xB0, REG_B: 0x00, REG_C: 0x13, REG_D: 0x00, REG_E: 0xD8,
                       REG_H: 0x01, REG_L: 0x4D, SP: 0xFFFE, PC: 0x0100}  # fmt: skip
POST_BOOT_IO = {0xFF00: 0xCF, 0xFF02: 0x7E, 0xFF07: 0xF8, 0xFF0F: 0xE1, 0xFF40: 0x91, 0xFF41: 0x85,
                0xFF47: 0xFC, 0xFF48: 0xFF, 0xFF49: 0xFF}  # fmt: skip
IO_READ_MASKS = {0xFF02: 0x7E, 0xFF07: 0xF8, 0xFF0F: 0xE0, 0xFF41: 0x80}  # bits that read as 1
BUTTON_BITS = {"right": 0, "left": 1, "up": 2, "down": 3, "a": 4, "b": 5, "select": 6, "start": 7}
