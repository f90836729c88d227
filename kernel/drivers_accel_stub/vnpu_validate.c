// SPDX-License-Identifier: GPL-2.0-only
/*
 * Copyright (c) 2026 The vnpu authors
 *
 * Command-stream validation before a job is queued.
 *
 * The stream is decoded with the table generated from uapi/vnpu_isa.toml
 * (vnpu_isa_table.h). A malformed stream fails with -ENOEXEC: an unknown
 * opcode, a header whose reserved bits or size are wrong, a truncated
 * instruction, undefined flag bits, a reserved byte that is not zero, an
 * operand slot out of range or not defined by an earlier TENSOR, an operand
 * that is set without its enabling flag, a TENSOR with an unknown dtype or
 * an empty dimension, no END, or bytes after END. A stream that names
 * memory outside the job's BOs fails with -EACCES: every tensor an
 * instruction reads must lie inside one BO listed with DRM_VNPU_JOB_BO_READ,
 * every tensor it writes inside one BO listed with DRM_VNPU_JOB_BO_WRITE.
 *
 * The stream checked is the kernel's copy, the one the device runs
 * (vnpu_cmdbuf.c), so userspace cannot change it after the check. The
 * check is always on: a file's page tables map all of its BOs, so they
 * keep a job to its file's memory, and only the check keeps it to the BOs
 * it lists, in the directions it lists them.
 */
#include <linux/overflow.h>
#include <linux/unaligned.h>

#include <drm/drm_print.h>

#include "vnpu_isa.h"
#include "vnpu_isa_table.h"
#include "vnpu_job.h"

/**
 * struct vnpu_tensor - a TENSOR slot as the validator tracks it
 * @defined: an earlier TENSOR instruction set the slot
 * @start: first device VA the tensor can touch
 * @end: one past the last such VA
 */
struct vnpu_tensor {
	bool defined;
	u64 start;
	u64 end;
};

static u32 vnpu_get_u32(const u8 *insn, u32 off)
{
	return get_unaligned_le32(insn + off);
}

/*
 * Byte range [start, end) a TENSOR can touch: the element at the largest
 * index of every dimension, plus one element. Returns -EACCES if the range
 * overflows the 64-bit VA space (it then lies in no BO).
 */
static int vnpu_tensor_extent(const u8 *insn, struct vnpu_tensor *t)
{
	static const u32 dims[] = { VNPU_ISA_TENSOR_N, VNPU_ISA_TENSOR_H, VNPU_ISA_TENSOR_W,
				    VNPU_ISA_TENSOR_C };
	static const u32 strides[] = { VNPU_ISA_TENSOR_STRIDE_N, VNPU_ISA_TENSOR_STRIDE_H,
				       VNPU_ISA_TENSOR_STRIDE_W, VNPU_ISA_TENSOR_STRIDE_C };
	u32 dtype = vnpu_get_u32(insn, VNPU_ISA_TENSOR_DTYPE);
	u64 last = 0, term;
	unsigned int i;

	if (dtype >= ARRAY_SIZE(vnpu_isa_dtype_size) || !vnpu_isa_dtype_size[dtype])
		return -ENOEXEC;
	for (i = 0; i < ARRAY_SIZE(dims); i++) {
		u32 dim = vnpu_get_u32(insn, dims[i]);

		if (!dim)
			return -ENOEXEC;
		/* (2^32 - 1)^2 fits in 64 bits; only the sums can overflow. */
		term = (u64)(dim - 1) * vnpu_get_u32(insn, strides[i]);
		if (check_add_overflow(last, term, &last))
			return -EACCES;
	}
	t->start = get_unaligned_le64(insn + VNPU_ISA_TENSOR_VA);
	if (check_add_overflow(t->start, last, &t->end) ||
	    check_add_overflow(t->end, (u64)vnpu_isa_dtype_size[dtype], &t->end))
		return -EACCES;
	t->defined = true;
	return 0;
}

/*
 * Reserved words of @op (its reserved members, implicit padding and the
 * tail up to the 8-byte size) must be zero; the generated table marks them
 * (bit i: bytes [4i, 4i + 4)).
 */
static bool vnpu_reserved_clear(const struct vnpu_isa_op_desc *op, const u8 *insn)
{
	u32 w;

	for (w = 0; w < op->size / 4; w++)
		if (op->reserved_words & BIT_ULL(w) && vnpu_get_u32(insn, 4 * w))
			return false;
	return true;
}

/* Is [start, end) inside one BO of the job used in direction @need? */
static int vnpu_check_access(const struct vnpu_tensor *t, const struct vnpu_job_bo *bos,
			     u32 bo_count, u32 need)
{
	u32 i;

	for (i = 0; i < bo_count; i++) {
		u64 va = vnpu_bo_va(bos[i].bo);
		u64 size = vnpu_bo_size(bos[i].bo);

		if (t->start >= va && t->end <= va + size)
			return (bos[i].flags & need) == need ? 0 : -EACCES;
	}
	return -EACCES;
}

/**
 * vnpu_validate_stream() - check a command stream before queueing it
 * @vdev: the device, for debug messages
 * @stream: the stream's bytes (the kernel's copy, which the device runs)
 * @size: its size in bytes, a multiple of 8
 * @bos: the BOs the job lists
 * @bo_count: their number
 *
 * Return: 0, -ENOEXEC for a malformed stream, or -EACCES for an access
 * outside the listed BOs or against a BO's listed direction.
 */
int vnpu_validate_stream(struct vnpu_device *vdev, const u8 *stream, u32 size,
			 const struct vnpu_job_bo *bos, u32 bo_count)
{
	struct vnpu_tensor slots[VNPU_ISA_SLOTS] = {};
	u32 off = 0;

	while (off < size) {
		const u8 *insn = stream + off;
		const struct vnpu_isa_op_desc *op;
		u32 header, opcode, insn_size, need, flags = 0;
		unsigned int i;
		int ret;

		if (size - off < VNPU_ISA_HEADER_SIZE)
			goto malformed;
		header = vnpu_get_u32(insn, 0);
		opcode = VNPU_ISA_HEADER_OPCODE(header);
		insn_size = VNPU_ISA_HEADER_INSN_SIZE(header);
		if (opcode >= ARRAY_SIZE(vnpu_isa_ops) || !vnpu_isa_ops[opcode].size)
			goto malformed;
		op = &vnpu_isa_ops[opcode];
		if (header & VNPU_ISA_HEADER_RESERVED_MASK || insn_size != op->size ||
		    insn_size > size - off)
			goto malformed;

		if (op->flags_offset >= 0) {
			flags = vnpu_get_u32(insn, op->flags_offset);
			if (flags & ~op->flags_allowed)
				goto malformed;
		}

		if (!vnpu_reserved_clear(op, insn))
			goto malformed;

		if (opcode == VNPU_OP_TENSOR) {
			u32 slot = vnpu_get_u32(insn, VNPU_ISA_TENSOR_SLOT);

			if (slot >= VNPU_ISA_SLOTS)
				goto malformed;
			ret = vnpu_tensor_extent(insn, &slots[slot]);
			if (ret) {
				drm_dbg_driver(&vdev->drm, "TENSOR at byte %u: %d\n", off, ret);
				return ret;
			}
		}

		for (i = 0; i < op->num_operands; i++) {
			const struct vnpu_isa_operand_desc *opd = &op->operands[i];
			u32 slot = vnpu_get_u32(insn, opd->offset);

			if (opd->when && !(flags & opd->when)) {
				if (slot)
					goto malformed;
				continue;
			}
			if (slot >= VNPU_ISA_SLOTS || !slots[slot].defined)
				goto malformed;
			need = opd->dir == VNPU_ISA_DIR_OUT ? DRM_VNPU_JOB_BO_WRITE :
							       DRM_VNPU_JOB_BO_READ;
			ret = vnpu_check_access(&slots[slot], bos, bo_count, need);
			if (ret) {
				drm_dbg_driver(&vdev->drm,
					       "%s at byte %u: slot %u [%#llx, %#llx) outside a %s BO\n",
					       op->name, off, slot, slots[slot].start,
					       slots[slot].end,
					       need == DRM_VNPU_JOB_BO_WRITE ? "writable" :
					       "readable");
				return ret;
			}
		}

		off += insn_size;
		if (opcode == VNPU_OP_END)
			return off == size ? 0 : -ENOEXEC;
	}
malformed:
	drm_dbg_driver(&vdev->drm, "malformed command stream at byte %u of %u\n", off, size);
	return -ENOEXEC;
}
